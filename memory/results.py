"""What bank operations return (reports) and raise, and `parse_time` for `--as-of` arguments."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from crl.memory.errors import BankError
from crl.memory.storage.journal import JournalEntry


class RecordNotFoundError(BankError, LookupError):
    """No record has that id (or id prefix)."""


class IngestError(BankError, RuntimeError):
    """A queued episode could not be written to the bank (raised by `flush` and `close`)."""


REMOVED_SKIP = "removed or rolled back"
"""`IngestResult.skipped` for an episode whose id the journal removed (`rm`, a rollback): never stored again."""


@dataclass
class IngestResult:
    """What `ingest_episode` did: how many new steps it stored, or why it skipped."""

    record_id: str
    new_steps: int = 0
    skipped: str | None = None


@dataclass
class SyncReport:
    """What `sync` / `ingest_run_log` read and stored."""

    logs_read: int = 0
    logs_unchanged: int = 0
    episodes_ingested: int = 0
    steps_ingested: int = 0
    episodes_skipped: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass
class ImportReport:
    """What `import_file` stored."""

    path: str
    stored_as: str
    episodes: int
    steps: int
    rules: int
    pending_review: int = 0
    kept_existing: list[str] = field(default_factory=list)


@dataclass
class RebuildReport:
    """What `rebuild` replayed."""

    as_of: float | None
    entries: int
    episodes: int
    steps: int
    rules: int
    reused_vectors: int
    seconds: float
    missing: list[str] = field(default_factory=list)
    dropped: int = 0


@dataclass
class HistoryItem:
    """A journal entry touching a record; `cancelled` when a later rollback undid it."""

    entry: JournalEntry
    cancelled: bool


@dataclass
class MemoryStats:
    """Counts, value histogram and disk use of the bank."""

    episodes: int
    steps: int
    rules: int
    by_family: dict[str, int]
    by_tier: dict[str, int]
    by_outcome: dict[str, int]
    by_source: dict[str, int]
    by_skill: dict[str, int]
    steps_by_family: dict[str, int]
    value_histogram: list[tuple[float, float, int]]
    journal_entries: int
    disk_bytes: int
    mode: str
    embedding: str
    schema_version: int


def parse_time(value: float | int | str | datetime) -> float:
    """UNIX seconds from a number, a datetime or an ISO-8601 string (naive means local time)."""
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a time; use ISO 8601 (2025-01-31T12:00) or UNIX seconds") from None
    if isinstance(value, datetime):
        return value.timestamp()
    raise TypeError(f"cannot read a time from {value!r}")
