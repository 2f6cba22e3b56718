"""Keeping the Chroma view in step with the journal: open, catch up, commit, rebuild, migrate.

Every change goes the same way: under the journal lock, fold what other processes
appended, replay entries past this view's watermark (journalled but perhaps not applied:
a process died between the two), append the new entries, apply them, then advance the
watermark. The watermark lives in `<memory>/view_state.json`, keyed by the view's id and
the journal's id, so a wiped or replaced view (a new id) is replayed from the start.
"""

from __future__ import annotations

import bisect
import json
import os
import time
from pathlib import Path
from typing import Any

from crl.memory.records import KINDS, SCHEMA_VERSION
from crl.memory.results import RebuildReport
from crl.memory.storage.apply import EntrySkipped, Materializer, VectorCache
from crl.memory.storage.journal import Journal, JournalEntry
from crl.memory.storage.journal_state import JournalState
from crl.memory.storage.store import LAYOUT, LAYOUT_CHANGES, ChromaView, NewerSchemaError, StoreError


class ViewKeeper:
    """Owns the journal state and the view's watermark; applies entries through a `Materializer`."""

    def __init__(self, memory_dir: Path, journal: Journal, view: ChromaView, materializer: Materializer, where: str):
        self.dir = memory_dir
        self.journal = journal
        self.view = view
        self.materializer = materializer
        self.where = where
        self.state = JournalState()
        self.view_id = ""
        self.warnings: list[str] = materializer.warnings  # one list: the journal's, the materializer's, ours
        self.state.warnings = self.warnings

    @property
    def identity(self) -> str:
        return self.materializer.embedder.identity

    def open(self, rebuild_on_model_change: bool) -> None:
        """Check the view's schema and model, migrate or rebuild it if needed, replay what is pending.

        Raises:
            NewerSchemaError: the view was written by a newer crl.
            StoreError: the view was embedded with another model (and no rebuild was asked for).
        """
        with self.journal.locked():
            self.state.refresh(self.journal)
            self._open(rebuild_on_model_change)

    def _open(self, rebuild_on_model_change: bool) -> None:
        meta = self.view.meta()
        if meta is None:
            if self.view.collection_names():
                self._migrate(0)
            else:
                self.rebuild_view(reuse_vectors=False)
            return
        version = int(meta.get("schema_version", 0))
        if version > SCHEMA_VERSION:
            raise NewerSchemaError(
                f"the memory store ({self.where}) was written by a newer crl (schema v{version}, this crl "
                f"reads v{SCHEMA_VERSION}); upgrade crl, or point --memory-url/--home elsewhere"
            )
        if version < SCHEMA_VERSION:
            self._migrate(version)
            return
        if meta.get("embedding") != self.identity:
            if not rebuild_on_model_change:
                raise StoreError(
                    f"the memory was embedded with {meta.get('embedding')}, but this configuration uses "
                    f"{self.identity}. Run `crl memory rebuild` to re-embed it with the new model, "
                    "or set memory.embedding_model back"
                )
            self.rebuild_view(reuse_vectors=False)
            return
        self.view_id = meta["view_id"]
        stamped = int(meta.get("layout", 1))
        if stamped < LAYOUT:
            new = "; ".join(LAYOUT_CHANGES[v] for v in range(stamped + 1, LAYOUT + 1))
            self.warnings.append(f"rebuilt the memory view in collection layout {LAYOUT} ({new})")
            self.rebuild_view(reuse_vectors=True)
            return
        if self.view.legacy_collections():
            self.rebuild_view(reuse_vectors=True)  # collections without a plain-client embedding function
            return
        self._replay_pending()

    def _migrate(self, version: int) -> None:
        """An older view: back it up raw, then rebuild it from the logs (it is only a view)."""
        stamp = time.strftime("%Y%m%d-%H%M%S")
        backup = self.dir / "backups" / f"view-v{version}-{stamp}.jsonl"
        self.view.dump(backup)
        self.warnings.append(
            f"migrated the memory view from schema v{version} to v{SCHEMA_VERSION}; backup in {backup}"
        )
        self.rebuild_view(reuse_vectors=False)

    def _watermark_path(self) -> Path:
        return self.dir / "view_state.json"

    def _watermark(self) -> int:
        try:
            data = json.loads(self._watermark_path().read_text())
        except (OSError, ValueError):
            return 0
        if data.get("view_id") != self.view_id or data.get("journal_id") != self.journal.journal_id:
            return 0
        return int(data.get("applied_through", 0))

    def _set_watermark(self, offset: int) -> None:
        path = self._watermark_path()
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_text(
            json.dumps({"view_id": self.view_id, "journal_id": self.journal.journal_id, "applied_through": offset})
        )
        os.replace(tmp, path)

    def _apply(self, entry: JournalEntry, check_applied: bool, **hints: Any) -> None:
        try:
            self.materializer.apply(entry, check_applied, **hints)
        except EntrySkipped as e:
            self.warnings.append(str(e))

    def _replay_pending(self) -> int:
        """Apply effective entries past the watermark; returns how many."""
        mark = self._watermark()
        if self.state.last_rollback_seq >= mark:
            self.rebuild_view(reuse_vectors=True)
            return len(self.state.entries)
        start = bisect.bisect_left(self.state.entries, mark, key=lambda e: e.seq)
        pending = self.state.entries[start:]
        for e in pending:
            self._apply(e, check_applied=True)
        if self.state.offset != mark:
            self._set_watermark(self.state.offset)
        return len(pending)

    def catch_up(self) -> None:
        """Fold entries other processes appended, follow a view another process replaced, replay.

        Call it holding `journal.locked()`.
        """
        self.state.refresh(self.journal)
        meta = self.view.meta()
        if meta is None or meta.get("view_id") != self.view_id:
            self.view.forget_collections()
            self._open(rebuild_on_model_change=False)
            return
        self._replay_pending()

    def refresh(self) -> None:
        """Fold entries appended since the last look (under the lock: another thread may be writing)."""
        with self.journal.locked():
            self.state.refresh(self.journal)

    def rebuild_view(self, reuse_vectors: bool) -> RebuildReport:
        """Wipe the view and replay every effective entry; call it holding `journal.locked()`."""
        t0 = time.monotonic()
        cache = VectorCache()
        meta = self.view.meta()
        if reuse_vectors and meta is not None and meta.get("embedding") == self.identity:
            for kind in KINDS:
                for record, vector in self.view.scan(kind, embeddings=True):
                    cache.add(record, vector)
        self.view.wipe()
        self.view_id = self.view.init_meta(self.identity, time.time())["view_id"]
        self.materializer.cache = cache
        warnings_before = len(self.warnings)
        try:
            for e in self.state.entries:
                self._apply(e, check_applied=False)
        finally:
            self.materializer.cache = VectorCache()
        self._set_watermark(self.state.offset)
        counts = {k: sum(self.view.count(k, f) for f in self.view.families(k)) for k in ("episode", "step")}
        return RebuildReport(
            as_of=None,
            entries=len(self.state.entries),
            episodes=counts["episode"],
            steps=counts["step"],
            rules=sum(1 for _ in self.view.scan("rule")),
            reused_vectors=len(cache),
            seconds=time.monotonic() - t0,
            missing=self.warnings[warnings_before:],
        )

    def commit(self, entries: list[JournalEntry], hints: dict[int, dict[str, Any]] | None = None) -> list[JournalEntry]:
        """Append and apply entries (hints by position); call it holding the lock, after `catch_up`."""
        self.journal.append(entries)
        written = self.state.refresh(self.journal)
        if len(written) != len(entries):
            raise RuntimeError(
                "the journal changed under its lock; is the memory directory on a filesystem without locks?"
            )
        for i, e in enumerate(written):
            self._apply(e, check_applied=False, **(hints or {}).get(i, {}))
        self._set_watermark(self.state.offset)
        return written

    def write(self, entry: JournalEntry) -> JournalEntry:
        """Lock, catch up, commit one entry."""
        with self.journal.locked():
            self.catch_up()
            return self.commit([entry])[0]
