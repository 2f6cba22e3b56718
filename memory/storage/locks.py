"""The embedded store's owner lock: one process per memory directory (Chroma is not process-safe).

An OS file lock (flock on POSIX, via `filelock`), so it is released when its process dies,
however it dies. A second process waits at most `timeout_s` and gets a `StoreLockedError`
that says who holds the store and how to share it instead (server mode).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from filelock import FileLock, Timeout

from crl.memory.errors import BankError


class StoreLockedError(BankError, RuntimeError):
    """Another process owns this embedded store."""


class StoreLock:
    """Exclusive ownership of `memory_dir` for the life of this object (until `release`)."""

    def __init__(self, memory_dir: str | Path, timeout_s: float = 1.0):
        self.dir = Path(memory_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path = self.dir / "lock"
        self.owner_path = self.dir / "lock.owner"
        # thread_local=False: the owner may release from another thread than the one that acquired
        self._lock = FileLock(
            str(self.path), timeout=timeout_s, thread_local=False, fallback_to_soft=False, preserve_lock_file=True
        )
        try:
            self._lock.acquire()
        except Timeout:
            raise StoreLockedError(self._message()) from None
        self.owner_path.write_text(f"pid {os.getpid()} on {socket.gethostname()}\n")

    def _message(self) -> str:
        try:
            owner = self.owner_path.read_text().strip()
        except OSError:
            owner = "another process"
        return (
            f"the memory store {self.dir} is in use by {owner}; an embedded store belongs to one process. "
            "Wait for it to finish, or share one memory between processes with a Chroma server: "
            f"`chroma run --path {self.dir / 'chroma'} --host 127.0.0.1 --port 8000`, then pass "
            "`--memory-url http://127.0.0.1:8000` to every crl command"
        )

    @property
    def held(self) -> bool:
        return self._lock.is_locked

    def release(self) -> None:
        """Give the store up (idempotent)."""
        if self._lock.is_locked:
            try:
                self.owner_path.unlink()
            except OSError:
                pass
            self._lock.release(force=True)
