"""The journal folded into what the bank needs to know: which entries count, what was ingested.

A `rollback` entry (written by `rebuild(as_of=T)`) cancels every earlier entry made after
T; the episodes whose ingestion it cancels are not ingested again by `sync`. Everything
else is a plain left fold over the entries in journal order.

A `drop` entry (written by `rebuild(drop_run=R)` or `rebuild(drop_import=F)`) cancels,
for good, every entry that came from run R (made by actor `run:R`, or ingesting one of its
episodes) or from import file F, earlier or later; `sync` never ingests R's episodes again.

A corrupt journal line, or an entry whose payload does not fold, is left out and described
in `warnings` (naming its line) instead of stopping the bank. Imports are folded apart from
ingestion (`imported`): an imported copy never makes `sync` think a run's episode is stored.
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
        self.imported: dict[str, str] = {}
        self.dropped_runs: set[str] = set()
        self.dropped_imports: set[str] = set()
        self.dropped: list[JournalEntry] = []
        self.warnings: list[str] = []
        self._line = 1

    def refresh(self, journal: Journal) -> list[JournalEntry]:
        """Fold the entries appended since the last refresh; returns them."""
        new, self.offset, self._line = journal.read_numbered(self.offset, self._line, self.warnings)
        return [entry for entry in new if self.observe(entry)]

    def came_from_dropped(self, e: JournalEntry) -> bool:
        """Whether entry `e` came from a dropped run or import."""
        p = e.payload
        if e.op == "import":
            return p.get("file") in self.dropped_imports
        if not self.dropped_runs:
            return False
        if e.actor.startswith("run:") and e.actor[4:] in self.dropped_runs:
            return True
        return e.op == "ingest" and p.get("run_id") in self.dropped_runs

    def observe(self, entry: JournalEntry) -> bool:
        """Fold one entry; False (and a warning) for one whose payload does not fold."""
        if entry.op == "drop":
            run, file = entry.payload.get("run_id"), entry.payload.get("import")
            if not isinstance(run, str | None) or not isinstance(file, str | None) or not (run or file):
                return self._skip(entry, ValueError("a drop names a run_id or an import"))
            self.dropped_runs.update([run] if run else [])
            self.dropped_imports.update([file] if file else [])
            gone = [e for e in self.entries if self.came_from_dropped(e)]
            for e in gone:
                e.dropped = True
            self.dropped += gone
            self.entries = [e for e in self.entries if not self.came_from_dropped(e)]
            self.last_rollback_seq = entry.seq
            self._refold()
            return True
        if self.came_from_dropped(entry):
            entry.dropped = True
            self.dropped.append(entry)
            return True
        if entry.op == "rollback":
            try:
                as_of = float(entry.payload["as_of"])
            except (KeyError, TypeError, ValueError) as e:
                return self._skip(entry, e)
            kept = [e for e in self.entries if e.time <= as_of]
            for e in self.entries:
                if e.time > as_of and e.op == "ingest":
                    self.rolled_back.add(e.ids[0])
            self.entries = kept
            self.last_rollback_seq = entry.seq
            self._refold()
            return True
        try:
            self._fold(entry)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            return self._skip(entry, e)
        self.entries.append(entry)
        return True

    def _refold(self) -> None:
        self.ingested, self.removed, self.imported = {}, set(), {}
        for e in self.entries:
            self._fold(e)

    def _skip(self, entry: JournalEntry, error: Exception) -> bool:
        self.warnings.append(
            f"journal line {entry.line} ({entry.op}): skipped, its payload is not understood "
            f"({type(error).__name__}: {error})"
        )
        return False

    def _fold(self, e: JournalEntry) -> None:
        if e.op == "ingest":
            p = e.payload
            rid = e.ids[0]
            mark = IngestMark(p["family"], int(p["n_steps"]), bool(p["finished"]), list(p["novelty"]))
            self.ingested[rid] = mark
            self.episode_record_ids[p["episode_id"]] = rid
            self.removed.discard(rid)
            self.imported.pop(rid, None)
        elif e.op == "import":
            skipped = set(e.payload.get("skipped", []))
            for rid in e.payload.get("episodes", {}):
                parse_record_id(rid)
                if rid in skipped or rid in self.ingested:
                    continue
                self.imported[rid] = e.payload["file"]
                self.episode_record_ids.setdefault(rid.split(":", 2)[2], rid)
                self.removed.discard(rid)
        elif e.op == "rm":
            self.removed.update(e.ids)

    def entry_at_line(self, line: int) -> JournalEntry | None:
        """The effective entry on journal line `line`, if any."""
        return next((e for e in self.entries if e.line == line), None)

    def may_sync(self, episode_record_id: str) -> bool:
        """False for an episode that was removed, whose ingestion a rollback cancelled, or of a dropped run
        (run episodes are named `<run id>-NNNN`)."""
        if episode_record_id in self.removed or episode_record_id in self.rolled_back:
            return False
        episode_id = episode_record_id.split(":", 2)[-1]
        return not any(episode_id.startswith(run + "-") for run in self.dropped_runs)
