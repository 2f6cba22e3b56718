"""The journal: an append-only JSONL record of every change made to the bank after the fact.

Together with the per-run episode logs it is the source of truth; the Chroma view is
rebuilt from the two. Each line is one `JournalEntry` (who, what, which records, when); its
`seq` is the byte offset of the line, unique and increasing. The first line is a header
naming the journal, so a shared Chroma server can keep one watermark per journal.

Writers hold `Journal.locked()` (an OS file lock plus a thread lock) while they append and
apply, so entries are applied in journal order even with several processes on one server.

Ops and their payloads:
    ingest      ids=[episode id]  {episode_id, run_id, family, task, n_steps, finished,
                                   novelty[n], step_values[n], value, log | episode,
                                   outcome (finished: status, success, return... as logged)}
    import      ids=[...]         {file, count, episodes, skipped (ids the bank made itself)}
    review      ids=[...]         {decision: accept | reject | edit, tier (accept), set (edit), note}
    tag, untag  ids=[...]         {tags}
    tier        ids=[...]         {tier}  (golden, regular, quarantine)
    rm          ids=[...]         {reason}
    credit      ids=[...]         {target, success}
    rule_add    ids=[rule id]     {record}
    rule_edit   ids=[rule id]     {text}
    rule_vote   ids=[rule id]     {delta}
    rollback    ids=[]            {as_of}
    drop        ids=[]            {run_id | import (file)}: cancels what came from it, for good
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from crl.memory.errors import BankError

JOURNAL_VERSION = 1
OPS = frozenset(
    {
        "ingest",
        "import",
        "tag",
        "untag",
        "tier",
        "rm",
        "credit",
        "decay",
        "rule_add",
        "rule_edit",
        "rule_vote",
        "rollback",
        "review",
        "drop",
    }
)


class JournalError(BankError, RuntimeError):
    """The journal cannot be read or was written by a newer crl; the message says what to do."""


@dataclass
class JournalEntry:
    """One change: `op` on records `ids` with `payload`, made by `actor` at `time` (UNIX s).

    `seq` is the line's byte offset; `line` its line number in the journal (0: not known);
    `dropped` is set when the entry came from a run or import that a `drop` entry cancelled.
    """

    op: str
    ids: list[str]
    payload: dict[str, Any]
    actor: str
    time: float = field(default_factory=time.time)
    seq: int = -1
    v: int = JOURNAL_VERSION
    line: int = 0
    dropped: bool = False

    def to_json(self) -> str:
        data = {
            "v": self.v,
            "time": self.time,
            "actor": self.actor,
            "op": self.op,
            "ids": self.ids,
            "payload": self.payload,
        }
        return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any], seq: int, line: int = 0) -> "JournalEntry":
        v = int(data.get("v", 0))
        if v > JOURNAL_VERSION:
            raise JournalError(
                f"journal entry at byte {seq} has version {v}, newer than this crl understands "
                f"({JOURNAL_VERSION}); upgrade crl"
            )
        return cls(
            op=data["op"],
            ids=list(data.get("ids", [])),
            payload=dict(data.get("payload", {})),
            actor=data.get("actor", ""),
            time=float(data["time"]),
            seq=seq,
            v=v,
            line=line,
        )


class Journal:
    """The journal file `path`, its lock, and the id in its header line."""

    def __init__(self, path: str | Path, fsync: bool = True, lock_timeout_s: float = 30.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fsync = fsync
        self._file_lock = FileLock(
            str(self.path) + ".lock", timeout=lock_timeout_s, fallback_to_soft=False, preserve_lock_file=True
        )
        self._thread_lock = threading.RLock()
        with self.locked():
            if self.path.exists():
                self._cut_torn_tail()
            if not self.path.exists() or self.path.stat().st_size == 0:
                header = {"v": JOURNAL_VERSION, "op": "header", "journal_id": uuid.uuid4().hex, "time": time.time()}
                self._write_lines([json.dumps(header)])
            with open(self.path, "rb") as f:
                first = f.readline()
        try:
            header = json.loads(first)
            self.journal_id: str = header["journal_id"]
        except (ValueError, KeyError):
            raise JournalError(
                f"{self.path} does not start with a journal header; move it aside and run `crl memory rebuild`"
            ) from None
        if int(header.get("v", 0)) > JOURNAL_VERSION:
            raise JournalError(f"{self.path} was written by a newer crl (journal v{header['v']}); upgrade crl")

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the journal for a read-append-apply sequence (reentrant within a thread)."""
        with self._thread_lock:
            try:
                self._file_lock.acquire()
            except Timeout:
                raise JournalError(
                    f"timed out waiting for the journal lock {self._file_lock.lock_file}; "
                    "another crl process is writing to this memory for too long"
                ) from None
            try:
                yield
            finally:
                self._file_lock.release()

    def _cut_torn_tail(self) -> None:
        """Drop a partial last line left by a writer that died mid-append (cheap: reads the tail)."""
        size = self.path.stat().st_size
        if size == 0:
            return
        with open(self.path, "rb+") as f:
            f.seek(size - 1)
            if f.read(1) == b"\n":
                return
            pos = size
            while pos > 0:
                start = max(0, pos - 65536)
                f.seek(start)
                block = f.read(pos - start)
                nl = block.rfind(b"\n")
                if nl >= 0:
                    f.truncate(start + nl + 1)
                    return
                pos = start
            f.truncate(0)

    def _write_lines(self, lines: list[str]) -> int:
        """Append lines; returns the byte offset of the first one."""
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            start = os.lseek(fd, 0, os.SEEK_END)
            os.write(fd, data)
            if self.fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        return start

    def append(self, entries: list[JournalEntry]) -> list[JournalEntry]:
        """Write `entries` (setting their `seq`); call it inside `locked()`."""
        if not entries:
            return entries
        for e in entries:
            if e.op not in OPS:
                raise ValueError(f"unknown journal op {e.op!r}")
        lines = [e.to_json() for e in entries]
        with self.locked():
            self._cut_torn_tail()
            offset = self._write_lines(lines)
        for e, line in zip(entries, lines):
            e.seq = offset
            offset += len(line.encode("utf-8")) + 1
        return entries

    def end(self) -> int:
        """Current size in bytes: the `seq` the next entry will get."""
        return self.path.stat().st_size

    def read(self, start: int = 0) -> tuple[list[JournalEntry], int]:
        """Entries whose line starts at or after byte `start` (header skipped), and the offset
        just past the last complete line (where the next read should start).

        Raises:
            JournalError: a line is corrupt (`read_numbered` can skip it instead).
        """
        entries, offset, _ = self.read_numbered(start)
        return entries, offset

    def read_numbered(
        self, start: int = 0, first_line: int | None = None, skipped: list[str] | None = None
    ) -> tuple[list[JournalEntry], int, int]:
        """As `read`, with entries numbered by line, and the number of the line at the returned offset.

        Args:
            first_line: the line number of the line at `start` (known from 1 when `start` is 0),
                so entries carry their `line`.
            skipped: when given, a corrupt line is left out and described here (naming its line)
                instead of failing the whole read.
        """
        entries: list[JournalEntry] = []
        line = first_line if first_line is not None else (1 if start == 0 else 0)
        with open(self.path, "rb") as f:
            f.seek(start)
            offset = start
            for raw in f:
                if not raw.endswith(b"\n"):
                    break  # a writer is mid-line (or died); the next append cuts a dead one off
                seq = offset
                offset += len(raw)
                try:
                    data = json.loads(raw)
                    if data.get("op") != "header":
                        entries.append(JournalEntry.from_dict(data, seq, line))
                except JournalError:
                    raise
                except (ValueError, KeyError, TypeError, AttributeError) as e:
                    at = f"line {line}" if line else f"byte {seq}"
                    if skipped is None:
                        raise JournalError(
                            f"{self.path}: corrupt entry at {at} ({e}); fix or remove that line"
                        ) from None
                    skipped.append(f"{self.path} {at}: skipped a corrupt journal entry ({e})")
                line = line + 1 if line else 0
        return entries, offset, line
