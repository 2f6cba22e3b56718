"""Tools from MCP servers, through the official `mcp` SDK (imported only when a server is used).

A server is named by a command line, started as a subprocess and spoken to over stdio
(`"python my_server.py"`, `"npx -y @modelcontextprotocol/server-filesystem /tmp"`), or by a URL
(streamable HTTP; a URL ending in `/sse` uses the older SSE transport). Its tools join the
agent's tool list with the schemas the server gives them. One session per server stays open
for the whole run, on the tools' event loop (`agent.tools.loop`); `close()` ends it and stops
a stdio server.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from concurrent.futures import Future
from typing import Any

from crl.agent.tools.loop import LoopThread
from crl.agent.tools.tool import DEFAULT_TIMEOUT_S, Tool, ToolError

CONNECT_TIMEOUT_S = 60.0


class MCPToolError(ToolError):
    """An MCP tool answered with an error (`isError`); its text is the message."""


def is_url(spec: str) -> bool:
    """Whether a server spec is a URL rather than a command line."""
    return spec.startswith(("http://", "https://"))


class MCPServer:
    """One MCP server's session and its tools.

    Args:
        spec: a command line (stdio) or an http(s) URL.
        loop: the event loop the session lives on.
        timeout_s: the deadline of each of its tool calls.
        errlog: where a stdio server's stderr goes (default: discarded).
    """

    def __init__(self, spec: str, loop: LoopThread, timeout_s: float = DEFAULT_TIMEOUT_S, errlog=None) -> None:
        self.spec = spec
        self.loop = loop
        self.timeout_s = timeout_s
        self._errlog = errlog
        self._session = None
        self._ready: asyncio.Event | None = None
        self._closing: asyncio.Event | None = None
        self._served: Future | None = None

    def connect(self) -> list[Tool]:
        """Start (or reach) the server, initialise the session and list its tools.

        Raises:
            ToolError: the `mcp` package is missing, the server cannot be started or reached,
                or it did not answer within `CONNECT_TIMEOUT_S`.
        """
        try:
            import mcp  # noqa: F401
        except ImportError:
            raise ToolError("MCP tools need the `mcp` package: pip install 'mcp>=1.10,<2'") from None
        ready: Future = Future()
        self._served = asyncio.run_coroutine_threadsafe(self._serve(ready), self.loop.loop)
        try:
            listed = ready.result(timeout=CONNECT_TIMEOUT_S)
        except Exception as exc:
            self.close()
            how = "is the URL right and the server up?" if is_url(self.spec) else "run the command yourself to see why"
            raise ToolError(f"MCP server {self.spec!r} did not start: {type(exc).__name__}: {exc}; {how}") from None
        return [self._tool(t) for t in listed]

    async def _serve(self, ready: Future) -> None:
        from mcp import ClientSession

        self._closing = asyncio.Event()
        try:
            async with self._transport() as streams, ClientSession(streams[0], streams[1]) as session:
                await session.initialize()
                tools = []
                cursor = None
                while True:
                    page = await session.list_tools(cursor) if cursor else await session.list_tools()
                    tools.extend(page.tools)
                    cursor = getattr(page, "nextCursor", None)
                    if not cursor:
                        break
                self._session = session
                ready.set_result(tools)
                await self._closing.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            elif not isinstance(exc, (asyncio.CancelledError, GeneratorExit)):
                raise
        finally:
            self._session = None

    def _transport(self):
        if is_url(self.spec):
            if self.spec.rstrip("/").endswith("/sse"):
                from mcp.client.sse import sse_client

                return sse_client(self.spec)
            from mcp.client.streamable_http import streamablehttp_client

            return streamablehttp_client(self.spec)
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        argv = shlex.split(self.spec)
        if not argv:
            raise ToolError("an empty --mcp command; give the server's command line or URL")
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(os.environ))
        return stdio_client(params, errlog=self._errlog or open(os.devnull, "w"))  # noqa: SIM115

    def _tool(self, listed: Any) -> Tool:
        name = listed.name

        async def call(**arguments: Any) -> str:
            return await self.call(name, arguments)

        schema = dict(listed.inputSchema or {"type": "object", "properties": {}})
        schema.setdefault("type", "object")
        return Tool(
            name=name,
            description=listed.description or "",
            parameters=schema,
            fn=call,
            timeout_s=self.timeout_s,
            source=f"mcp:{self.spec}",
        )

    async def call(self, name: str, arguments: dict[str, Any]) -> str:
        """Call tool `name` on the server; its text content (or structured content as JSON).

        Raises:
            MCPToolError: the server says the call failed.
            ToolError: the session is closed.
        """
        import json

        if self._session is None:
            raise ToolError(f"the MCP session with {self.spec!r} is closed")
        result = await self._session.call_tool(name, arguments)
        parts = [getattr(c, "text", None) for c in result.content or []]
        text = "\n".join(p for p in parts if p is not None)
        structured = getattr(result, "structuredContent", None)
        if not text and structured is not None:
            text = json.dumps(structured, ensure_ascii=False)
        if result.isError:
            raise MCPToolError(text or "the server reported an error without a message")
        return text

    def close(self) -> None:
        """End the session (a stdio server exits with it)."""
        if self._closing is not None:
            self.loop.loop.call_soon_threadsafe(self._closing.set)
        if self._served is not None:
            try:
                self._served.result(timeout=10)
            except Exception:
                self._served.cancel()
            self._served = None
