"""Reranking retrieved memories: a documented score, MMR for diversity, epsilon exploration.

Candidates arrive by embedding similarity (a pool per query and kind). Each gets

    score = w_sim * similarity + w_out * outcome + w_util * utility + w_val * value + w_rec * recency

(weights in `RetrievalConfig.weights`; defaults 1.0 / 0.05 / 0.3 / 0.05 / 0.02) where

    similarity  cosine similarity of the memory's state text to the query state, or the
                cross-encoder's relevance in [0, 1] when `rerank = "cross-encoder"`
    outcome     the discounted outcome that followed the memory: gamma^d after a success,
                0 after a failure, with d the steps from it to the episode's end (a step:
                `steps_to_end`; an episode: its length - 1, so short successes rank higher)
    utility     the advantage of having used it (0 with `use_utility = False`):
                (wins + m * p) / (uses + m) - p, with p the family's success rate and m =
                `utility_prior`; 0 for a memory never used, > 0 when the episodes that used
                it succeeded more often than the family does, < 0 when they failed more
    value       the memory's value label in [0, 1] (tags at ingest, EMA-smoothed by credit)
    recency     0.5 ** (age in days / recency_half_life_days), age since it was stored

and a rule also gets `w_rule * min(max(score, 0), RULE_SCORE_CAP) / RULE_SCORE_CAP`: the
votes the reflector gave it (`memory.rule_editor`), so among rules about as relevant the
better supported one wins (breakdown key "rule_score").

A synthetic episode or step (`source = "synthetic"`) then counts `synthetic_weight` times:
its score becomes w * score (a negative score is lowered by the same share), the change
shown under the breakdown key "synthetic". The weight is the drift monitor's
(`memory.synthesis.drift.synthetic_weight`): 1 unless its family's synthetic experience
has drifted from the real one.

Then maximal marginal relevance picks k of them greedily (Carbonell and Goldstein 1998):

    next = argmax_i  lambda * score_i - (1 - lambda) * max_{j chosen} cos(e_i, e_j)

so a near-duplicate of a memory already chosen loses to a slightly lower-scored different
one (lambda = `mmr_lambda`; 1 ranks by score alone). `ScoredMemory.breakdown` holds each
weighted term (they sum to `score`) and the MMR penalty under "diversity".

Exploration: with probability epsilon, one slot of a context pack goes to a memory drawn
from the rest of its pool with weight (1 + novelty) / (1 + use count), i.e. novel or rarely
used experience, instead of the lowest-ranked one chosen (`reason = "explore"`).

    >>> round(utility_advantage(uses=4, wins=4, baseline=0.5, prior=2.0), 3)
    0.333
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from crl.memory.records import AnyRecord, EpisodeRecord, RuleRecord, StepRecord
from crl.memory.retrieval.config import RetrievalConfig

DAY_S = 86_400.0
RULE_SCORE_CAP = 10.0
TERMS = ("similarity", "outcome", "utility", "value", "recency")


@dataclass
class ScoredMemory:
    """A memory chosen for a context pack, with why.

    Attributes:
        id: the record id.
        kind: "episode", "step" or "rule".
        record: the record (episodes with their trajectory).
        score: the rerank score (the sum of the weighted terms in `breakdown`).
        breakdown: each weighted term's contribution, and the MMR penalty as "diversity".
        reason: "top" (ranked in) or "explore" (the epsilon slot).
    """

    id: str
    kind: str
    record: AnyRecord
    score: float
    breakdown: dict[str, float] = field(default_factory=dict)
    reason: str = "top"

    def to_dict(self) -> dict[str, Any]:
        """id, kind, score, breakdown and reason, JSON-ready (for the step's log entry)."""
        return {
            "id": self.id,
            "kind": self.kind,
            "score": round(self.score, 4),
            "breakdown": {k: round(v, 4) for k, v in self.breakdown.items()},
            "reason": self.reason,
        }

    def describe(self) -> str:
        """One line saying why it was chosen, e.g. for `crl explain`."""
        terms = ", ".join(f"{k} {v:+.3f}" for k, v in self.breakdown.items() if v)
        return f"{self.id} [{self.reason}] score {self.score:.3f} ({terms})"


@dataclass
class Candidate:
    """A retrieved record before reranking: its similarity and (for MMR) its embedding."""

    record: AnyRecord
    similarity: float
    embedding: np.ndarray | None = None


def outcome_term(record: AnyRecord, gamma: float) -> float:
    """gamma^(steps to the episode's end) after a success, 0 otherwise (see the module docstring)."""
    if isinstance(record, EpisodeRecord):
        return gamma ** max(0, record.length - 1) if record.outcome == "success" else 0.0
    if isinstance(record, StepRecord):
        if record.episode_outcome != "success":
            return 0.0
        return gamma ** (record.steps_to_end or 0)
    return 0.0


def utility_advantage(uses: float, wins: float, baseline: float, prior: float) -> float:
    """Shrunk success rate of the episodes that used a memory, minus the family's rate.

    Example:
        >>> utility_advantage(uses=0, wins=0, baseline=0.3, prior=2.0)
        0.0
    """
    return (wins + prior * baseline) / (uses + prior) - baseline


def recency_term(created_at: float, now: float, half_life_days: float) -> float:
    """0.5 ** (age in days / half-life); 1 for a memory stored now (or in the future)."""
    age_days = max(0.0, now - created_at) / DAY_S
    return 0.5 ** (age_days / half_life_days)


def synthetic_penalty(record: AnyRecord, score: float, synthetic_weight: float) -> float:
    """What down-weighting takes off a synthetic episode's or step's score: -(1 - w) * |score|
    (score 0.8, w 0.25: -0.6); 0 for real records and rules."""
    if record.source != "synthetic" or synthetic_weight == 1.0 or isinstance(record, RuleRecord):
        return 0.0
    return -(1.0 - synthetic_weight) * abs(score)


def score(
    candidate: Candidate, config: RetrievalConfig, baseline: float, now: float, synthetic_weight: float = 1.0
) -> tuple[float, dict[str, float]]:
    """The rerank score of one candidate and its breakdown (weighted terms).

    `synthetic_weight` scales the score of a synthetic episode or step (module docstring).
    """
    r, w = candidate.record, config.weights
    utility = (
        utility_advantage(r.effective_uses, r.effective_wins, baseline, config.utility_prior)
        if config.use_utility
        else 0.0
    )
    terms = {
        "similarity": w.similarity * candidate.similarity,
        "outcome": w.outcome * outcome_term(r, config.ec_gamma),
        "utility": w.utility * utility,
        "value": w.value * r.value,
        "recency": w.recency * recency_term(r.created_at, now, config.recency_half_life_days),
    }
    if isinstance(r, RuleRecord):
        terms["rule_score"] = w.rule_score * min(max(r.score, 0.0), RULE_SCORE_CAP) / RULE_SCORE_CAP
    penalty = synthetic_penalty(r, sum(terms.values()), synthetic_weight)
    if penalty:
        terms["synthetic"] = penalty
    return float(sum(terms.values())), terms


def mmr_select(
    scores: Sequence[float], embeddings: Sequence[np.ndarray | None], k: int, lam: float
) -> list[tuple[int, float]]:
    """Greedy maximal marginal relevance: indices of up to `k` items with their MMR penalty.

    Items without an embedding are never penalised. Ties go to the lower index, so sort the
    items best first.

    Example:
        >>> e = [np.array([1.0, 0.0]), np.array([1.0, 0.0]), np.array([0.0, 1.0])]
        >>> [i for i, _ in mmr_select([1.0, 0.9, 0.8], e, 2, lam=0.5)]
        [0, 2]
    """
    remaining = list(range(len(scores)))
    chosen: list[tuple[int, float]] = []
    max_sim = np.zeros(len(scores))
    while remaining and len(chosen) < k:
        best, best_val = remaining[0], -np.inf
        for i in remaining:
            val = lam * scores[i] - (1.0 - lam) * max_sim[i]
            if val > best_val + 1e-12:
                best, best_val = i, val
        chosen.append((best, -(1.0 - lam) * float(max_sim[best])))
        remaining.remove(best)
        e = embeddings[best]
        if e is not None:
            for i in remaining:
                if embeddings[i] is not None:
                    max_sim[i] = max(max_sim[i], float(np.dot(embeddings[i], e)))
    return chosen


def rank(
    candidates: Sequence[Candidate],
    k: int,
    config: RetrievalConfig,
    baseline: float,
    now: float,
    synthetic_weight: float = 1.0,
) -> tuple[list[ScoredMemory], list[ScoredMemory]]:
    """Score a pool, pick `k` by MMR; returns (chosen in order, the whole pool scored, best first).

    `synthetic_weight` scales the scores of synthetic episodes and steps (module docstring).
    """
    scored = []
    for c in candidates:
        s, terms = score(c, config, baseline, now, synthetic_weight)
        scored.append((ScoredMemory(c.record.id, c.record.kind, c.record, s, terms), c.embedding))
    scored.sort(key=lambda x: (-x[0].score, x[0].id))
    pool = [m for m, _ in scored]
    if k <= 0:
        return [], pool
    picks = mmr_select([m.score for m in pool], [e for _, e in scored], k, config.mmr_lambda)
    chosen = []
    for i, penalty in picks:
        m = pool[i]
        chosen.append(ScoredMemory(m.id, m.kind, m.record, m.score, dict(m.breakdown, diversity=penalty)))
    return chosen, pool


def explore_weight(record: AnyRecord) -> float:
    """How much exploration favours a memory: (1 + novelty) / (1 + use count)."""
    return (1.0 + float(getattr(record, "novelty", 0.0))) / (1.0 + record.use_count)


def explore(
    chosen: dict[str, list[ScoredMemory]],
    pools: dict[str, list[ScoredMemory]],
    rng: random.Random,
    epsilon: float,
) -> str | None:
    """With probability `epsilon`, swap one slot for a novel or rarely used memory, in place.

    A slot list is eligible when it has a pick and its pool holds a memory not picked; one
    eligible list is drawn uniformly, its lowest-ranked pick is replaced, and the newcomer
    is drawn from the rest of the pool with `explore_weight`. The RNG is consumed the same
    way for the same inputs, so a seeded run is reproducible.

    Args:
        chosen: slot lists by name ("successes", "failures", "hints"), edited in place.
        pools: the scored pool each list was chosen from.

    Returns:
        The name of the list that got an explored memory, or None.
    """
    draw = rng.random()
    if draw >= epsilon:
        return None
    eligible = []
    for name, picked in chosen.items():
        taken = {m.id for m in picked}
        rest = [m for m in pools.get(name, []) if m.id not in taken]
        if picked and rest:
            eligible.append((name, rest))
    if not eligible:
        return None
    name, rest = eligible[rng.randrange(len(eligible))]
    newcomer = rng.choices(rest, weights=[explore_weight(m.record) for m in rest])[0]
    chosen[name][-1] = ScoredMemory(
        newcomer.id, newcomer.kind, newcomer.record, newcomer.score, dict(newcomer.breakdown), reason="explore"
    )
    return name
