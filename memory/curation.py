"""The eviction policy: a capacity per task family, and a keep-score to choose what goes.

Following the seed (section 3.2: "low-value experiences that have not been used for a long
time are evicted first"), each regular episode gets

    keep = (w_value * value + w_use * use + w_recency * recency) / (w_value + w_use + w_recency)
    use     = 1 - 1 / (1 + use_count)                     (0 never used, -> 1 used often)
    recency = 0.5 ** (days since last use, or since creation, / half-life)

When a family holds more retrievable episodes (regular + golden) than its capacity, the
regular episodes with the lowest keep-score are evicted (with their steps) until it fits.
Golden episodes are never evicted; quarantined ones are neither counted nor evicted (they
stay, out of retrieval and fine-tuning, until someone removes them).

    >>> from memory.config import EvictionWeights
    >>> round(keep_score(0.8, 0, 0.0, EvictionWeights(), 30.0), 3)
    0.65
"""

from __future__ import annotations

from dataclasses import dataclass

from crl.memory.config import EvictionWeights
from crl.memory.records import EpisodeRecord

SECONDS_PER_DAY = 86_400.0


@dataclass
class EvictionCandidate:
    """An episode the policy would evict, and why."""

    id: str
    family: str
    score: float
    value: float
    use_count: int
    age_days: float


def keep_score(value: float, use_count: int, age_days: float, w: EvictionWeights, half_life_days: float) -> float:
    """How much an episode deserves to stay (formula in the module docstring)."""
    use = 1.0 - 1.0 / (1.0 + use_count)
    recency = 0.5 ** (max(0.0, age_days) / half_life_days)
    total = w.value + w.use + w.recency
    if total <= 0:
        return 0.0
    return (w.value * value + w.use * use + w.recency * recency) / total


def plan_eviction(
    episodes: list[EpisodeRecord],
    capacity: int,
    now: float,
    weights: EvictionWeights,
    half_life_days: float,
) -> list[EvictionCandidate]:
    """The episodes to evict so that every family fits `capacity`, lowest keep-score first."""
    by_family: dict[str, list[EpisodeRecord]] = {}
    for ep in episodes:
        if ep.tier != "quarantine":
            by_family.setdefault(ep.family, []).append(ep)
    plan: list[EvictionCandidate] = []
    for family in sorted(by_family):
        live = by_family[family]
        excess = len(live) - capacity
        if excess <= 0:
            continue
        scored = []
        for ep in live:
            if ep.tier != "regular":
                continue
            age = (now - (ep.last_used_at or ep.created_at)) / SECONDS_PER_DAY
            score = keep_score(ep.value, ep.use_count, age, weights, half_life_days)
            scored.append(EvictionCandidate(ep.id, family, score, ep.value, ep.use_count, age))
        scored.sort(key=lambda c: (c.score, -c.age_days, c.id))
        plan.extend(scored[:excess])
    return plan
