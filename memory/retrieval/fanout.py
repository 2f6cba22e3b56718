"""Independent bank reads of one retrieval, run at the same time (`retrieval.query_threads`).

A decision's reads (success episodes, failure episodes, steps, rules) do not depend on each
other. Chroma's embedded client releases the GIL while it searches and reads, so on a machine
with a spare core they overlap; the store is already read and written from several threads (the
agent ingests on a background thread) and its record cache takes a lock.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any


class Fanout:
    """Runs a batch of independent calls on a small thread pool, created on first use.

    With `threads <= 1` (or one call) the calls run one after another in the caller's thread.
    A forked child makes its own pool (the parent's threads do not exist there).
    """

    def __init__(self, threads: int):
        self.threads = threads
        self._pool: ThreadPoolExecutor | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def run(self, calls: Sequence[Callable[[], Any]]) -> list[Any]:
        """The calls' results, in order; the first exception raised by any call is raised here."""
        if self.threads <= 1 or len(calls) <= 1:
            return [call() for call in calls]
        pool = self._executor()
        futures = [pool.submit(call) for call in calls[1:]]
        try:
            first = calls[0]()
        except BaseException:
            wait(futures)
            raise
        return [first, *(f.result() for f in futures)]

    def close(self) -> None:
        """Stop the pool's threads (a later `run` starts a new pool)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.shutdown(wait=True)

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None or self._pid != os.getpid():
                self._pool = ThreadPoolExecutor(self.threads - 1, thread_name_prefix="crl-retrieval")
                self._pid = os.getpid()
            return self._pool
