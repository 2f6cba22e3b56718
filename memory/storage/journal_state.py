"""The journal folded into what the bank needs to know: which entries count, what was ingested.

A `rollback` entry (written by `rebuild(as_of=T)`) cancels every earlier entry made after
T; the episodes whose ingestion it cancels are not ingested again by `sync`. Everything
else is a plain left fold over the entries in journal order.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from crl.memory.records import parse_record_id
from crl.memory.storage.journal import Journal, JournalEntry


@dataclass
class IngestMark:
    """How much of an episode the bank holds: `n_steps` steps, `finished` or not, and the
    novelty computed for each of those steps when they were ingested."""

    family: str
    n_steps: int
    finished: bool
    novelty: list[float] = field(default_factory=list)


class JournalState:
    """Effective entries (rollbacks applied) and the ingestion marks they imply."""

    def __init__(self) -> None:
        self.entries: list[JournalEntry] = []
        self.offset = 0
        self.last_rollback_seq = -1
        self.ingested: dict[str, IngestMark] = {}
        self.removed: set[str] = set()
        self.rolled_back: set[str] = set()
        self.episode_record_ids: dict[str, str] = {}

    def refresh(self, journal: Journal) -> list[JournalEntry]:
        """Fold the entries appended since the last refresh; returns them."""
        new, self.offset = journal.read(self.offset)
        for entry in new:
            self.observe(entry)
        return new

    def observe(self, entry: JournalEntry) -> None:
        """Fold one entry."""
        if entry.op == "rollback":
            as_of = float(entry.payload["as_of"])
            kept = [e for e in self.entries if e.time <= as_of]
            for e in self.entries:
                if e.time > as_of and e.op == "ingest":
                    self.rolled_back.add(e.ids[0])
            self.entries = kept
            self.last_rollback_seq = entry.seq
            self.ingested, self.removed = {}, set()
            for e in kept:
                self._fold(e)
            return
        self.entries.append(entry)
        self._fold(entry)

    def _fold(self, e: JournalEntry) -> None:
        if e.op == "ingest":
            p = e.payload
            rid = e.ids[0]
            self.ingested[rid] = IngestMark(p["family"], int(p["n_steps"]), bool(p["finished"]), list(p["novelty"]))
            self.episode_record_ids[p["episode_id"]] = rid
            self.removed.discard(rid)
        elif e.op == "import":
            for rid, (n_steps, finished, novelty) in e.payload.get("episodes", {}).items():
                family = parse_record_id(rid)[1]
                self.ingested[rid] = IngestMark(family, int(n_steps), bool(finished), list(novelty))
                self.episode_record_ids[rid.split(":", 2)[2]] = rid
                self.removed.discard(rid)
                self.rolled_back.discard(rid)
        elif e.op == "rm":
            self.removed.update(e.ids)

    def may_sync(self, episode_record_id: str) -> bool:
        """False for an episode that was removed or whose ingestion a rollback cancelled."""
        return episode_record_id not in self.removed and episode_record_id not in self.rolled_back
