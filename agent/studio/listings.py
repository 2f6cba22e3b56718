"""Listings of the bank kept current from the journal, so a large bank is scanned once.

`ExperienceBank.ls` reads every record of a kind from Chroma (20-30 s for 50,000 episodes on
2 busy cores). The studio calls it once per kind, then follows the journal: every change to the
view is a journal entry naming the records it touched, so after new entries only those records
are read again (`view.locate`) and put back in place. Each filter set and sort is derived from
that, matched and ordered exactly as `ls` matches and orders (a test holds them equal).

The first listing of a kind is built in the background (`build`, which `Studio.warm_up` starts)
in reads of 1,000 records (`Pager.records`) without holding the bank's lock, so pages (`memory.storage.paged` reads them straight from the
view meanwhile), searches and curation are answered while it reads; a request that needs the
listing waits for that one scan instead of starting another.

Entries that touch records they do not name (a rollback, a run's entries dropped, an episode's
steps moved with it) make that kind scan again. Records named by another process's entries of
the last `RECHECK_S` seconds are read again on every refresh, since a process journals an entry
a moment before its view shows it.
"""

from __future__ import annotations

import bisect
import gc
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from crl.memory.records import AnyRecord, EpisodeRecord, StepRecord
from crl.memory.storage.paged import Pager

SORT_KEYS = {
    "recency": lambda r: r.created_at,
    "value": lambda r: r.value,
    "use": lambda r: r.use_count,
    "utility": lambda r: r.utility,
    "last_used": lambda r: r.last_used_at or 0.0,
}
PREFIX = {"episode": "ep:", "step": "st:", "rule": "ru:"}
NAMED_OPS = {"ingest", "tier", "tag", "untag", "rm", "credit", "decay", "import", "rule_add", "rule_edit", "rule_vote"}
EPISODE_WIDE_OPS = {"ingest", "tier", "rm", "import"}  # an episode's steps follow it without being named
RECHECK_S = 30.0
CACHED = 32
FREEZE_AT = 10_000
KEPT_CHANGES = 64


def origin_of(record: AnyRecord) -> str:
    """Where a record came from, as the studio's source filter reads it: imported (through `crl
    memory import`, whatever it claims to be), else its `source` (real or synthetic)."""
    return "imported" if getattr(record, "imported_from", None) else record.source


def matches(flt: Any, record: AnyRecord) -> bool:
    """Whether `record` passes the filter as `ExperienceBank.ls` filters (`flt` is a `RecordFilter`);
    the source filter also knows `imported` (`origin_of`)."""
    if record.kind != flt.kind:
        return False
    if flt.family and record.family != flt.family:
        return False
    if flt.tier and record.tier != flt.tier:
        return False
    if flt.source and origin_of(record) != flt.source:
        return False
    if flt.tag and flt.tag not in record.tags:
        return False
    if isinstance(record, EpisodeRecord | StepRecord):
        outcome = record.outcome if isinstance(record, EpisodeRecord) else record.episode_outcome
        if flt.outcome and outcome != flt.outcome:
            return False
        if flt.variant and record.variant != flt.variant:
            return False
        if flt.skill and flt.skill not in record.skills:
            return False
        return True
    return not (flt.variant or flt.skill or flt.outcome)


def sort_key(sort: str):
    """The key `ls` orders by for `sort` (it lists the highest first, ties by id)."""
    key = SORT_KEYS[sort]
    return lambda r: (key(r), r.id)


@dataclass
class Derived:
    """The records of one (filter, sort), ascending by `sort_key` (`keys` beside them, `key_of` by
    id), and `listed`: `ls`'s order of them (the reverse)."""

    base: int
    version: int
    ascending: list[AnyRecord]
    keys: list[tuple]
    key_of: dict[str, tuple]
    listed: list[AnyRecord]

    @classmethod
    def of(cls, base: "KindListing", flt: Any, sort: str) -> "Derived":
        key = sort_key(sort)
        pairs = sorted(((key(r), r) for r in base.records.values() if matches(flt, r)), key=lambda p: p[0])
        ascending = [r for _, r in pairs]
        keys = [k for k, _ in pairs]
        return cls(id(base), base.version, ascending, keys, {r.id: k for k, r in pairs}, ascending[::-1])

    def update(self, base: "KindListing", flt: Any, sort: str) -> bool:
        """Apply the base's changes since this was derived; False when they are no longer known.

        Each changed record is taken out and put back by bisection, so a change costs no pass
        over the listing (a pass allocating per record also wakes the garbage collector, which
        then walks every record held: hundreds of ms at 50,000).
        """
        changed = base.changed_since(self.version)
        if changed is None:
            return False
        if changed:
            key = sort_key(sort)
            for rid in sorted(changed):
                old = self.key_of.pop(rid, None)
                if old is not None:
                    at = bisect.bisect_left(self.keys, old)
                    del self.keys[at]
                    del self.ascending[at]
                record = base.records.get(rid)
                if record is not None and matches(flt, record):
                    k = key(record)
                    at = bisect.bisect_left(self.keys, k)
                    self.keys.insert(at, k)
                    self.ascending.insert(at, record)
                    self.key_of[rid] = k
            self.listed = self.ascending[::-1]
        self.version = base.version
        return True


@dataclass
class KindListing:
    """Every record of one kind, by id, current up to journal byte `offset` (`version` counts changes)."""

    records: dict[str, AnyRecord]
    offset: int
    version: int = 0
    recent: dict[str, float] = field(default_factory=dict)  # record id -> when another process's entry named it
    changes: list[tuple[int, set[str]]] = field(default_factory=list)  # (version, the ids that changed then)

    def changed_since(self, version: int) -> set[str] | None:
        """The ids changed after `version`, or None when older changes were forgotten."""
        if version == self.version:
            return set()
        if not self.changes or self.changes[0][0] > version + 1:
            return None
        return set().union(*(ids for v, ids in self.changes if v > version))


class Listings:
    """All records of each kind, scanned once with `ls` and kept current from the journal, and
    per (filter, sort) the records `ls` would return, derived from them when they change."""

    def __init__(self, bank: Any, own_actor: str, lock: Any):
        self.bank = bank
        self.own_actor = own_actor
        self.lock = lock  # the bank's (`MemoryView.lock`)
        self._kinds: dict[str, KindListing] = {}
        self._derived: OrderedDict[tuple, Derived] = OrderedDict()
        self._building: dict[str, threading.Event] = {}
        self._guard = threading.Lock()
        self.scans = 0

    def ready(self, kind: str) -> bool:
        """Whether every record of `kind` has been listed (pages then come from the listing)."""
        return kind in self._kinds

    def build(self, kind: str) -> None:
        """List every record of `kind` once, without holding the bank's lock; a caller that finds
        the scan under way waits for it (call it without holding the bank's lock)."""
        with self._guard:
            if kind in self._kinds:
                return
            event = self._building.get(kind)
            mine = event is None
            if mine:
                event = self._building[kind] = threading.Event()
        if not mine:
            event.wait()
            return
        try:
            with self.lock:  # the studio's own changes are in the view before they release it
                end = self.bank.journal.end()
            records = {r.id: r for r in Pager(self.bank.view).records(kind)}
            with self.lock:
                if kind not in self._kinds:
                    self.scans += 1
                    self._kinds[kind] = KindListing(records, end)
            if len(records) >= FREEZE_AT:
                gc.freeze()  # what is held now stays: later collections need not walk it
        finally:
            with self._guard:
                self._building.pop(kind, None)
            event.set()

    def get(self, flt: Any, sort: str) -> list[AnyRecord]:
        """The records `bank.ls(flt..., sort=sort)` returns now (call it holding the bank's lock)."""
        if sort not in SORT_KEYS:
            raise ValueError(f"sort must be one of {', '.join(SORT_KEYS)}, not {sort!r}")
        base = self._current(flt.kind)
        key = (flt, sort)
        derived = self._derived.get(key)
        if derived is None or derived.base != id(base) or not derived.update(base, flt, sort):
            derived = Derived.of(base, flt, sort)
            self._derived[key] = derived
        self._derived.move_to_end(key)
        while len(self._derived) > CACHED:
            self._derived.popitem(last=False)
        return derived.listed

    def _current(self, kind: str) -> KindListing:
        end = self.bank.journal.end()
        base = self._kinds.get(kind)
        if base is None or not self._follow(base, kind, end):
            self.scans += 1
            base = KindListing({r.id: r for r in self.bank.ls(kind)}, end)
            self._kinds[kind] = base
            if len(base.records) >= FREEZE_AT:
                gc.freeze()  # what is held now stays: later collections need not walk it
        return base

    def _follow(self, base: KindListing, kind: str, end: int) -> bool:
        """Bring `base` up to the journal's `end`; False when only a new scan can."""
        now = time.time()
        base.recent = {rid: t for rid, t in base.recent.items() if now - t < RECHECK_S}
        if end == base.offset and not base.recent:
            return True
        named: set[str] = set(base.recent)
        if end != base.offset:
            if end < base.offset:
                return False  # the journal was replaced
            entries, offset = self.bank.journal.read(base.offset)
            for e in entries:
                if e.op not in NAMED_OPS:
                    return False
                if kind == "step" and e.op in EPISODE_WIDE_OPS and any(i.startswith("ep:") for i in e.ids):
                    return False
                mine = [i for i in e.ids if i.startswith(PREFIX[kind])]
                named.update(mine)
                if e.actor != self.own_actor:  # the studio's own writes are in the view before they return
                    base.recent.update((i, now) for i in mine)
            base.offset = offset
        if named:
            found = self.bank.view.locate(sorted(named))
            changed = set()
            for rid in named:
                loc = found.get(rid)
                old = base.records.get(rid)
                if loc is None:
                    if base.records.pop(rid, None) is not None:
                        changed.add(rid)
                elif old is None or old != loc.record:
                    base.records[rid] = loc.record
                    changed.add(rid)
            if changed:
                base.version += 1
                base.changes.append((base.version, changed))
                del base.changes[:-KEPT_CHANGES]
        return True
