"""One page of a namespace's records read straight from the Chroma view, sorted, without reading
every record: what a browser shows before it has listed the whole bank.

Reading records' metadata is what costs: a Chroma `get` of every one of 50,000 episodes'
metadata takes 15-25 s on two busy cores, their ids alone a fraction of a second, and a `get`
with a `where` filter on a flat metadata field only what it returns. The layout already splits
records by kind, family and bucket (`store`), and each record's metadata carries flat copies of
the fields a browser filters and sorts by (`tier`, `outcome`, `variant`, `created_at`, `value`,
`use_count`, `utility`). So the `n` records a page needs are found with `where` filters:

1. count the records matching the filters (ids only);
2. read the keys of a few of them spread over each collection and guess a bar the `n`-th highest
   key clears;
3. count the records at or above the bar (ids only, capped): too few lowers it, too many raises
   it (stepping out, then bisecting); then read only those records and order them as
   `ExperienceBank.ls` does (highest key first, ties by id, descending).

The result is exact whatever the guess: every record left out has a key below a bar that at least
`n` records clear. Filters on fields the metadata does not hold flat (tags and skills are
joined strings, an imported record is not marked there) and the last-used sort are not served
here (`pageable`); nor are rules (a few, listed whole). Many records tied at the bar (say every
fresh record's utility) are not all read: their ids are, and the page takes the highest.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from crl.memory.records import AnyRecord
from crl.memory.storage.store import BUCKETS, SUCCESS_BUCKETS, ChromaView, buckets_for, from_chroma

FLAT_SORTS = {"recency": "created_at", "value": "value", "use": "use_count", "utility": "utility"}
SLICES = 6
MAX_PROBES = 30
SCAN_CHUNK = 1000
SAMPLE_KEPT_S = 60.0


@dataclass(frozen=True)
class PageQuery:
    """The filters and sort of a page (`None`: no filter on that field); sorts as `ls` names them."""

    kind: str = "episode"
    family: str | None = None
    variant: str | None = None
    outcome: str | None = None
    tier: str | None = None
    sort: str = "recency"


def pageable(kind: str, sort: str, source: str | None = None, skill: str | None = None, tag: str | None = None) -> bool:
    """Whether a page of `kind` sorted by `sort` with these filters can be read here."""
    return kind in ("episode", "step") and sort in FLAT_SORTS and not (source or skill or tag)


def where_of(q: PageQuery, bucket: str, bar: float | None = None, op: str = "$gte") -> dict[str, Any] | None:
    """The Chroma `where` filter of `q` in a collection of `bucket` (and of the key compared with
    `bar` by `op`: at or above it by default), None for none. What the bucket already says is left out: a filter on a large share of
    a collection costs as much as reading its ids (an `ok` bucket holds only successes, `q` only
    quarantined records)."""
    clauses: list[dict[str, Any]] = []
    if q.tier is not None and bucket != "q":
        clauses.append({"tier": q.tier})
    if q.outcome is not None and bucket not in SUCCESS_BUCKETS:
        clauses.append({"outcome": q.outcome})
    if q.variant is not None:
        clauses.append({"variant": q.variant})
    if bar is not None:
        clauses.append({FLAT_SORTS[q.sort]: {op: int(bar) if q.sort == "use" else bar}})
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


@dataclass(frozen=True)
class Bar:
    """Where a page's records start: keys `op` `value`; `tie`: fewer than the page's records are
    past it, the rest share `value`."""

    value: float
    op: str = "$gte"
    tie: bool = False


@dataclass
class Source:
    """One collection a page reads: its bucket, how many of its records match and how many it
    holds; `loose` when most of them match (its filters are then checked on the records read:
    a `where` on a value most records share costs as much as reading their ids)."""

    col: Any
    bucket: str
    matching: int
    size: int

    @property
    def loose(self) -> bool:
        return self.matching * 2 >= self.size

    @property
    def share(self) -> float:
        return self.matching / self.size if self.size else 0.0


def matches(q: PageQuery, record: AnyRecord) -> bool:
    """Whether a record read from a collection passes `q`'s filters (those `where_of` can hold)."""
    outcome = getattr(record, "outcome", None) if record.kind == "episode" else getattr(record, "episode_outcome", None)
    return (
        (q.tier is None or record.tier == q.tier)
        and (q.outcome is None or outcome == q.outcome)
        and (q.variant is None or getattr(record, "variant", None) == q.variant)
    )


class Pager:
    """Pages of one view's records by `where` filters (see the module docstring)."""

    def __init__(self, view: ChromaView):
        self.view = view
        self._counts: dict[tuple, list[tuple[int, int]]] = {}
        self._bars: dict[tuple, Bar | None] = {}  # the bar a page was read with, kept like the counts
        self._samples: dict[tuple[str, str], tuple[float, list[float]]] = {}

    def sources(self, q: PageQuery, stamp: Any = None) -> list[Source]:
        """The collections holding `q`'s records (those that exist) with their counts (kept until
        `stamp` changes, when given: say the journal's end)."""
        families = [q.family] if q.family else self.view.families(q.kind)
        cols = [
            (col, bucket)
            for family in families
            for bucket in buckets_for(q.tier, q.outcome)
            if (col := self.view._for(q.kind, family, bucket)) is not None
        ]
        key = (q.kind, q.family, q.variant, q.outcome, q.tier, tuple(c.name for c, _ in cols), stamp)
        counts = self._counts.get(key) if stamp is not None else None
        if counts is None:
            counts = []
            for col, bucket in cols:
                size = col.count()
                where = where_of(q, bucket)
                counts.append((size if where is None else self.ids(col, where), size))
            if stamp is not None:
                self._counts = {k: v for k, v in self._counts.items() if k[-1] == stamp}
                self._counts[key] = counts
        return [Source(col, bucket, m, n) for (col, bucket), (m, n) in zip(cols, counts)]

    @staticmethod
    def ids(col: Any, where: dict[str, Any] | None, limit: int | None = None) -> int:
        """How many records of `col` match `where` (at most `limit`), reading their ids only."""
        return len(col.get(where=where, include=[], limit=limit)["ids"])

    def count(self, q: PageQuery) -> int:
        """How many records match `q`."""
        return sum(s.matching for s in self.sources(q))

    def page(self, q: PageQuery, page: int, per_page: int, stamp: Any = None) -> tuple[list[AnyRecord], int]:
        """Page `page` (from 1) of `q`'s records in `ls` order, and how many match in all (with
        `stamp`, the counts and the bar found are kept for the next call with the same stamp)."""
        sources = [s for s in self.sources(q, stamp) if s.matching]
        total = sum(s.matching for s in sources)
        n = min(page * per_page, total)
        if n <= 0:
            return [], total
        key = FLAT_SORTS[q.sort]
        kept = (q, n, stamp)
        want = n
        for _ in range(MAX_PROBES):
            bar = self._bars.pop(kept) if stamp is not None and kept in self._bars else self._bar(q, sources, want)
            records = [r for r in self._read(q, sources, bar) if matches(q, r)]
            if bar is not None and bar.tie:
                records += self._tied(q, sources, bar.value, n - len(records))
            if bar is None or len(records) >= n:
                break
            want *= 4  # the loose collections' estimate fell short: aim lower
        if stamp is not None:
            self._bars = {k: v for k, v in self._bars.items() if k[-1] == stamp} | {kept: bar}
        records.sort(key=lambda r: (getattr(r, key), r.id), reverse=True)
        return records[(page - 1) * per_page : n], total

    def _above(self, q: PageQuery, sources: list[Source], bar: float, cap: int, op: str = "$gte") -> float:
        """About how many matching records have a key `op` `bar` (counted up to about `cap`)."""
        above = 0.0
        for s in sources:
            if s.loose:
                above += self.ids(s.col, where_of(PageQuery(sort=q.sort), s.bucket, bar, op), limit=cap) * s.share
            else:
                above += self.ids(s.col, where_of(q, s.bucket, bar, op), limit=cap)
        return above

    def _bar(self, q: PageQuery, sources: list[Source], n: int) -> Bar | None:
        """A key about `n` matching records reach, and not many more (None: read them all).

        Counting reads ids only, so each probe costs little; the bar starts where a few sampled
        keys put it, then steps out (doubling) until it brackets the wanted count, then bisects.
        A sampled key many records share (every fresh record's utility) is checked for a tie:
        when fewer than `n` records are above it, the rest of the page is tied at it (`_tied`).
        """
        total = sum(s.matching for s in sources)
        cap = n + n // 2 + 10
        if total <= cap:
            return None
        keys = sorted(self._sample(q, sources), reverse=True)
        if not keys:
            return None
        shared = {k for k in keys if keys.count(k) > 1}
        integral = q.sort == "use"
        bar = keys[min(len(keys) - 1, int(n * len(keys) / total))]
        step = max((keys[0] - keys[-1]) / len(keys), abs(bar) * 1e-6, 1e-9)
        low = high = None  # a bar about n clear; one fewer than n clear
        for _ in range(MAX_PROBES):
            if integral:
                bar = float(round(bar))
            above = self._above(q, sources, bar, cap)
            if n <= above < cap:
                return Bar(bar)
            if above >= cap and (bar in shared or integral):
                strictly = self._above(q, sources, bar, cap, "$gt")
                if strictly < n:
                    return Bar(bar, "$gt", tie=True)
                if strictly < cap:
                    return Bar(bar, "$gt")
            if above < n:
                high = bar
            else:
                low = bar
            if low is not None and high is not None:
                if high - low <= (1 if integral else max(abs(low), 1.0) * 1e-12):
                    break  # records tied at `low`: read them all
                bar = (low + high) / 2
                if integral and round(bar) in (low, high):
                    break
            elif high is not None:
                bar, step = high - step, step * 2
            else:
                bar, step = low + step, step * 2
        return None if low is None else Bar(low)

    def _sample(self, q: PageQuery, sources: list[Source]) -> list[float]:
        """The sort keys of a few records spread over each collection (read without filters: a
        filtered read at an offset costs as much as the filter, and the bars are checked anyway).
        Each collection's are kept for `SAMPLE_KEPT_S`: they only guide the first bar."""
        field = FLAT_SORTS[q.sort]
        now = time.monotonic()
        keys: list[float] = []
        for s in sources:
            kept = self._samples.get((s.col.name, field))
            if kept is None or now - kept[0] > SAMPLE_KEPT_S:
                got_keys = []
                for j in range(min(SLICES, s.size)):
                    got = s.col.get(include=["metadatas"], limit=2, offset=int(s.size * j / SLICES))
                    got_keys.extend(float(m[field]) for m in got["metadatas"] if m.get(field) is not None)
                kept = self._samples[(s.col.name, field)] = (now, got_keys)
            keys.extend(kept[1])
        return keys

    def _read(self, q: PageQuery, sources: list[Source], bar: Bar | None) -> list[AnyRecord]:
        """The records of `sources` with a key past `bar` (filtered by `where` in the tight
        collections only: `matches` checks them all), episodes without their trajectory."""
        out: list[AnyRecord] = []
        for s in sources:
            shown = PageQuery(sort=q.sort) if s.loose else q
            where = where_of(shown, s.bucket) if bar is None else where_of(shown, s.bucket, bar.value, bar.op)
            offset = 0
            while True:
                got = s.col.get(where=where, include=["metadatas"], limit=self.view.batch, offset=offset)
                if not got["ids"]:
                    break
                out.extend(from_chroma(m) for m in got["metadatas"])
                offset += len(got["ids"])
        return out

    def _tied(self, q: PageQuery, sources: list[Source], value: float, need: int) -> list[AnyRecord]:
        """The `need` matching records with key `value` that come first in `ls` order (highest ids):
        their ids are read (cheap), then only those records."""
        if need <= 0:
            return []
        found: list[tuple[str, Source]] = []
        for s in sources:
            got = s.col.get(where=where_of(q, s.bucket, value, "$eq"), include=[])
            found.extend((rid, s) for rid in got["ids"])
        found.sort(key=lambda p: p[0], reverse=True)
        by_source: dict[int, tuple[Source, list[str]]] = {}
        for rid, s in found[:need]:
            by_source.setdefault(id(s), (s, []))[1].append(rid)
        out: list[AnyRecord] = []
        for s, ids in by_source.values():
            out.extend(from_chroma(m) for m in s.col.get(ids=ids, include=["metadatas"])["metadatas"])
        return out

    def records(self, kind: str, chunk: int = SCAN_CHUNK) -> Iterator[AnyRecord]:
        """Every record of `kind`, as `ExperienceBank.ls(kind)` reads them (episodes without their
        trajectory), in reads of `chunk` records: Chroma holds the interpreter for the whole of a
        read, so short reads let a server's other threads answer in between."""
        if kind == "rule":
            names = [self.view.name_of("rule", "", "")]
        else:
            names = [self.view.name_of(kind, f, b) for f in self.view.families(kind) for b in BUCKETS]
        for name in names:
            col = self.view._collection(name, create=False)
            if col is None:
                continue
            offset = 0
            while True:
                got = col.get(include=["metadatas"], limit=chunk, offset=offset)
                if not got["ids"]:
                    break
                yield from (from_chroma(m) for m in got["metadatas"])
                offset += len(got["ids"])
                time.sleep(0)
