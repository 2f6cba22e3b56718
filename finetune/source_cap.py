"""No single source may contribute more than a share of a dataset (`finetune.max_source_share`, s).

Retrieval caps each source's share of the support behind an action value
(`memory.retrieval.influence.cap_shares`); this is the same defence for SFT and DPO data. Every
example has a source: the import it came from (`import:<file>`, a curator's acceptance
included: the environment never checked it), the synthesis kind that made it
(`synthesis:stitch`, `synthesis:relabel`), or the run that played it (`run:<id>`). Which sources
are capped is `finetune.capped_sources`:

    untrusted  (default) imports and synthesis; runs are exempt, as retrieval exempts verified
               episodes: a home's runs are naturally uneven (a 200-episode run, then a 20-episode
               one), and capping them would throw most real, environment-verified data away.
    all        every run as well: for a memory that many writers share (one Chroma server), where
               one writer's runs must not dominate what the model learns.

The cap is taken of the capped total (a water-filling in whole examples: each capped source
keeps at most floor(s x total) examples, the total counted after capping), so it holds in the
dataset as written. With fewer than 1/s sources it cannot hold for everyone, so the share
applied is max(s, 1/k) for k sources: a dataset from one source is left whole, one from two is
split evenly at most. An SFT state counts once (its soft-target rows go together); a DPO pair
counts for its less trusted side (a capped source on either side, the chosen side first). The
examples a source keeps are those with the lowest stable hash of their step ids, so a rebuild
keeps the same ones; the card reports each cut source with its count before and after.

Example:
    >>> units = [(f"st:k:i-{i}:0", "import:x") for i in range(8)] + [(f"st:k:r-{i}:0", "run:r") for i in range(2)]
    >>> kept, cap = cap_sources(units, 0.5, "untrusted")
    >>> cap.kept, cap.dropped
    ({'import:x': 2}, 6)
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from crl.memory.records import EpisodeRecord

SCOPES = ("untrusted", "all")


def source_key(record: EpisodeRecord) -> str:
    """Who stands behind an episode's examples: its import, its synthesis kind, else its run.

    Example:
        >>> from types import SimpleNamespace as R
        >>> source_key(R(imported_from="imports/ab.jsonl", source="real", run_id="r1", provenance=None))
        'import:imports/ab.jsonl'
    """
    if record.imported_from:
        return f"import:{record.imported_from}"
    if record.source == "synthetic":
        return f"synthesis:{(record.provenance or {}).get('kind') or 'unknown'}"
    return f"run:{record.run_id}"


def is_capped(source: str, scope: str) -> bool:
    """Whether `source` is capped under `scope` (runs only with 'all')."""
    return scope == "all" or not source.startswith("run:")


@dataclass
class SourceCap:
    """What the cap did to a dataset.

    Attributes:
        share: the configured `max_source_share`.
        applied: the share applied: max(share, 1/k) for k sources.
        scope: `capped_sources`.
        sources: examples (SFT states, DPO pairs) per source before the cap.
        kept: examples kept, for each source the cap cut.
        dropped: examples left out.
    """

    share: float
    applied: float
    scope: str
    sources: dict[str, int] = field(default_factory=dict)
    kept: dict[str, int] = field(default_factory=dict)
    dropped: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> list[str]:
        """The card's lines on the cap."""
        lines = [
            f"- at most {self.applied:.0%} of the examples from one source"
            + (f" (max_source_share {self.share}; {len(self.sources)} sources)" if self.applied != self.share else "")
            + f"; capped sources: {'every source' if self.scope == 'all' else 'imports and synthesis'}"
        ]
        lines += [f"- {s}: {self.kept[s]} of {self.sources[s]} examples kept" for s in sorted(self.kept)]
        return lines


def _rank(key: str) -> str:
    return hashlib.sha1(key.encode()).hexdigest()


def _limit(counts: Counter, capped: list[str], share: float) -> int:
    """The most examples one capped source may keep: the largest L with L <= share x total(L)."""
    exempt = sum(n for s, n in counts.items() if s not in capped)
    limit = max(counts[s] for s in capped)
    while True:
        total = exempt + sum(min(counts[s], limit) for s in capped)
        lower = math.floor(share * total + 1e-9)
        if lower >= limit:
            return limit
        limit = lower


def cap_sources(units: Sequence[tuple[str, str]], share: float, scope: str) -> tuple[list[int], SourceCap]:
    """Indices of the examples to keep, in order, and what the cap did.

    Args:
        units: per example, (a stable key such as its step id, its source).
        share: `max_source_share` in (0, 1]; 1 turns the cap off.
        scope: 'untrusted' or 'all' (module docstring).

    Raises:
        ValueError: a share outside (0, 1] or an unknown scope.
    """
    if not 0.0 < share <= 1.0:
        raise ValueError(f"max_source_share must be in (0, 1], not {share}")
    if scope not in SCOPES:
        raise ValueError(f"capped_sources must be one of {', '.join(SCOPES)}, not {scope!r}")
    counts = Counter(source for _, source in units)
    applied = max(share, 1.0 / len(counts)) if counts else share
    report = SourceCap(round(share, 6), round(applied, 6), scope, dict(sorted(counts.items())))
    capped = [s for s in counts if is_capped(s, scope)]
    if applied >= 1.0 or not capped:
        return list(range(len(units))), report
    limit = _limit(counts, capped, applied)
    dropped: set[int] = set()
    for source in capped:
        if counts[source] <= limit:
            continue
        mine = [i for i, (_, s) in enumerate(units) if s == source]
        ranked = sorted(mine, key=lambda i: (_rank(units[i][0]), i))
        dropped.update(ranked[limit:])
        report.kept[source] = limit
    report.dropped = len(dropped)
    return [i for i in range(len(units)) if i not in dropped], report
