"""Listings of the bank kept current from the journal, so a large bank is scanned once.

`ExperienceBank.ls` reads every record of a kind from Chroma (about 18 s for 50,000 episodes on
2 busy cores). The studio calls it once per filter set and sort, then follows the journal: every
change to the view is a journal entry naming the records it touched, so after new entries only
those records are read again (`view.locate`) and put back in place, matched and ordered exactly
as `ls` matches and orders them. Entries that touch records they do not name (a rollback, a
run's entries dropped, an episode's steps moved with it) make the listing scan again. Records
named by entries of the last `RECHECK_S` seconds are read again on every refresh, since another
process journals an entry a moment before its view shows it.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from crl.memory.records import AnyRecord, EpisodeRecord, StepRecord

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
CACHED = 16


def matches(flt: Any, record: AnyRecord) -> bool:
    """Whether `record` passes the filter as `ExperienceBank.ls` filters (`flt` is a `RecordFilter`)."""
    if record.kind != flt.kind:
        return False
    if flt.family and record.family != flt.family:
        return False
    if flt.tier and record.tier != flt.tier:
        return False
    if flt.source and record.source != flt.source:
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


def ordered(records: list[AnyRecord], sort: str) -> list[AnyRecord]:
    """Records in `ls`'s order for `sort` (highest first, ties by id)."""
    key = SORT_KEYS[sort]
    return sorted(records, key=lambda r: (key(r), r.id), reverse=True)


@dataclass
class Listing:
    records: list[AnyRecord]
    offset: int
    recent: dict[str, float] = field(default_factory=dict)  # record id -> when an entry named it


class Listings:
    """Per (filter, sort): the listing and how far into the journal it is current."""

    def __init__(self, bank: Any, own_actor: str):
        self.bank = bank
        self.own_actor = own_actor
        self._cache: OrderedDict[tuple, Listing] = OrderedDict()
        self.scans = 0

    def get(self, flt: Any, sort: str) -> list[AnyRecord]:
        """The records `bank.ls(flt..., sort=sort)` returns now (call it holding the bank's lock)."""
        key = (flt, sort)
        listing = self._cache.get(key)
        end = self.bank.journal.end()
        if listing is None or not self._follow(listing, flt, sort, end):
            listing = self._scan(flt, sort, end)
            self._cache[key] = listing
        self._cache.move_to_end(key)
        while len(self._cache) > CACHED:
            self._cache.popitem(last=False)
        return listing.records

    def _scan(self, flt: Any, sort: str, end: int) -> Listing:
        self.scans += 1
        records = self.bank.ls(
            flt.kind,
            family=flt.family,
            variant=flt.variant,
            outcome=flt.outcome,
            tier=flt.tier,
            source=flt.source,
            skill=flt.skill,
            tag=flt.tag,
            sort=sort,
        )
        return Listing(records, end)

    def _follow(self, listing: Listing, flt: Any, sort: str, end: int) -> bool:
        """Bring `listing` up to the journal's `end`; False when only a new scan can."""
        now = time.time()
        listing.recent = {rid: t for rid, t in listing.recent.items() if now - t < RECHECK_S}
        if end == listing.offset and not listing.recent:
            return True
        named: set[str] = set(listing.recent)
        if end != listing.offset:
            if end < listing.offset:
                return False  # the journal was replaced
            entries, offset = self.bank.journal.read(listing.offset)
            for e in entries:
                if e.op not in NAMED_OPS:
                    return False
                if flt.kind == "step" and e.op in EPISODE_WIDE_OPS and any(i.startswith("ep:") for i in e.ids):
                    return False
                mine = [i for i in e.ids if i.startswith(PREFIX[flt.kind])]
                named.update(mine)
                if e.actor != self.own_actor:  # the studio's own writes are in the view before they return
                    listing.recent.update((i, now) for i in mine)
            listing.offset = offset
        if named:
            found = self.bank.view.locate(sorted(named))
            kept = [r for r in listing.records if r.id not in named]
            fresh = [loc.record for loc in found.values() if matches(flt, loc.record)]
            listing.records = ordered(kept + fresh, sort) if fresh else kept
        return True
