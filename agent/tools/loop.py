"""One asyncio event loop in a daemon thread, for async tools and MCP sessions, so the
synchronous agent loop can await them with a deadline."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """An event loop running in its own daemon thread until `close()`."""

    def __init__(self, name: str = "crl-tools") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run `coro` on the loop and wait for it; after `timeout_s` it is cancelled and
        `TimeoutError` raised."""

        async def bounded() -> T:
            return await asyncio.wait_for(coro, timeout_s) if timeout_s else await coro

        return asyncio.run_coroutine_threadsafe(bounded(), self.loop).result()

    def close(self) -> None:
        """Stop the loop and its thread."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self.loop.is_running():
            self.loop.close()
