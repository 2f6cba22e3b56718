"""A Chroma server that stops answering mid-run: one warning line, backoff, and nothing lost.

`guard(client, url)` wraps a server client (and every collection it hands out) so that a
connection failure surfaces as one `ServerUnavailable` (a `StoreError`: the command line
prints it as one red line) instead of a deep httpx traceback. `Outage` is the bank's view of
the server's health: the first failure prints a single warning, later attempts wait an
exponentially growing delay (`memory.reconnect_base_s` doubling up to `memory.reconnect_max_s`),
and the first success after an outage prints one line saying how long it lasted.

What the bank does meanwhile (`memory.bank`): the run keeps logging every step to its episode
log (the source of truth); episodes that could not be stored wait in a backlog and are stored,
in order, as soon as the server answers again (or by the next `crl memory sync`, which reads
the run logs); credit updates are journalled first (the journal is a local file) and applied
to the server's view when it returns; retrieval offers nothing while the server is down.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from crl.memory.storage.store import StoreError

log = logging.getLogger(__name__)

_RETRYABLE_STATUS = frozenset({502, 503, 504})


class ServerUnavailable(StoreError):
    """The Chroma server does not answer (stopped, restarting, unreachable)."""


def unreachable(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) says the server could not be reached, rather than refused a request."""
    try:
        import httpx
    except ImportError:  # pragma: no cover - chromadb's HttpClient needs httpx
        httpx = None  # type: ignore[assignment]
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, ServerUnavailable | ConnectionError | TimeoutError):
            return True
        if httpx is not None:
            if isinstance(e, httpx.TransportError):
                return True
            if isinstance(e, httpx.HTTPStatusError) and e.response.status_code in _RETRYABLE_STATUS:
                return True
        e = e.__cause__ or e.__context__
    return False


class _Guarded:
    """A proxy that turns connection failures of the wrapped object's calls into `ServerUnavailable`."""

    def __init__(self, target: Any, url: str):
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_url", url)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not callable(attr):
            return attr
        url = self._url

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                result = attr(*args, **kwargs)
            except Exception as e:
                if unreachable(e) and not isinstance(e, ServerUnavailable):
                    failure = ServerUnavailable(
                        f"the Chroma server at {url} stopped answering ({type(e).__name__}: {e})"
                    )
                    failure.cause = f"{type(e).__name__}: {e}"
                    raise failure from None
                raise
            return _wrap(result, url)

        return call

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)


def _wrap(result: Any, url: str) -> Any:
    """Collections the client returns are guarded too (lists of them from `list_collections`)."""
    from chromadb.api.models.Collection import Collection

    if isinstance(result, Collection):
        return _Guarded(result, url)
    return result


def safe_url(url: str) -> str:
    """`url` without any user or password in it (messages never show credentials)."""
    from urllib.parse import urlparse

    parsed = urlparse(url)
    if not parsed.hostname:
        return url
    port = f":{parsed.port}" if parsed.port else ""
    return f"{parsed.scheme}://{parsed.hostname}{port}"


def guard(client: Any, url: str) -> Any:
    """`client` with its (and its collections') connection failures raised as `ServerUnavailable`."""
    return _Guarded(client, safe_url(url))


class Outage:
    """Whether the server is down, when to try it again, and the one line said about it.

    Args:
        heartbeat: a call that raises while the server does not answer.
        url: the server, for the messages.
        base_s: the first retry delay; it doubles after each failed retry...
        max_s: ...up to this.
        say: where the warning lines go (default: stderr).
    """

    def __init__(
        self,
        heartbeat: Callable[[], Any],
        url: str,
        base_s: float = 0.5,
        max_s: float = 30.0,
        say: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.heartbeat = heartbeat
        self.url = safe_url(url)
        self.base_s = base_s
        self.max_s = max_s
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.clock = clock
        self.lock = threading.RLock()
        self.down_since: float | None = None
        self.delay = base_s
        self.next_try = 0.0
        self.outages = 0
        self.failed_calls = 0

    @property
    def down(self) -> bool:
        return self.down_since is not None

    def failed(self, exc: BaseException, pending: str = "") -> None:
        """A call failed because the server is unreachable: warn once per outage, back off."""
        with self.lock:
            self.failed_calls += 1
            now = self.clock()
            if self.down_since is None:
                self.down_since = now
                self.outages += 1
                self.delay = self.base_s
                self.say(
                    f"warning: the memory server {self.url} is unreachable ({_short(exc)}); the run goes on "
                    f"logging every episode and will store {pending or 'them'} when it answers again"
                )
            else:
                self.delay = min(self.max_s, self.delay * 2)
            self.next_try = now + self.delay

    def due(self) -> bool:
        """Whether it is time to try the server again (always, while it is up)."""
        return self.down_since is None or self.clock() >= self.next_try

    def probe(self) -> bool:
        """Ask the server (when a retry is due); True when it answers."""
        if self.down_since is None:
            return True
        if not self.due():
            return False
        try:
            self.heartbeat()
        except Exception as e:
            if not unreachable(e):
                raise
            self.failed(e)
            return False
        return True

    def recovered(self, stored: str = "") -> None:
        """The server answered again: one line saying how long it was gone and what was caught up."""
        with self.lock:
            if self.down_since is None:
                return
            gone = self.clock() - self.down_since
            self.down_since = None
            self.delay = self.base_s
            self.say(f"memory server {self.url} is back after {gone:.1f}s" + (f"; stored {stored}" if stored else ""))

    def wait(self, timeout_s: float) -> bool:
        """Retry with backoff for up to `timeout_s`; True once the server answers."""
        deadline = self.clock() + timeout_s
        while True:
            if self.probe():
                return True
            now = self.clock()
            if now >= deadline:
                return False
            time.sleep(max(0.01, min(self.next_try, deadline) - now))


def _short(exc: BaseException) -> str:
    text = getattr(exc, "cause", None) or str(exc).strip()
    text = text.splitlines()[0] if text else type(exc).__name__
    return text if len(text) <= 160 else text[:157] + "..."
