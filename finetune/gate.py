"""The promotion gate: a candidate adapter is promoted only if it is not worse than the current one.

Both sides play the same dev-fold seeds of the tasks the candidate was trained on, and
`finetune.gate_rule` decides:

- `not-worse` (the default): a paired test on the seeds both sides played. The candidate is
  refused only when it loses significantly more seeds that the current adapter wins than
  the other way round (exact one-sided binomial on the discordant pairs, McNemar's exact
  test, p < `gate_alpha`). It is the default because it keeps the gate's meaning (promote
  unless worse) while letting the data, not a fixed margin, say what "worse" is: at the
  20-48 dev episodes a round affords, a margin rule flips on two or three lucky seeds.
- `better`: promoted only when the candidate wins significantly more discordant seeds
  (p < `gate_alpha`); strict, for a stable production adapter.
- `margin`: the former rule on pooled rates, `candidate_rate >= current_rate - gate_margin`,
  unpaired; for evaluators that do not report per-seed outcomes.

The decision, its p-value and every number behind it go into the candidate's lineage, and
into the promotion log when it is promoted. Playing episodes is the agent's business, so
the gate takes an `Evaluator` (the CLI passes one built on `agent.app.start_run`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from crl.finetune.config import FinetuneConfig
from crl.finetune.errors import FinetuneError
from crl.finetune.registry import AdapterRegistry, GateRecord
from crl.tasks.evaluation import mcnemar_p


class GateError(FinetuneError, ValueError):
    """The gate cannot decide; the message says what to change."""


@dataclass
class TaskScore:
    """Successes of one side on one task's dev seeds, and the outcome of each seed."""

    task: str
    successes: int
    episodes: int
    run_id: str | None = None
    outcomes: dict[int, bool] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0


@dataclass
class GateDecision:
    """What the gate concluded and the numbers behind it."""

    passed: bool
    reason: str
    rule: str
    p_value: float | None = None
    candidate_only: int = 0
    current_only: int = 0
    pairs: int = 0


class Evaluator(Protocol):
    """Plays `episodes` dev-fold episodes of each task with the base model plus `adapter` (None: no adapter).

    Each `TaskScore` should carry `outcomes` (seed -> success) for the paired rules.
    """

    def __call__(self, adapter: Path | None, tasks: Sequence[str], episodes: int) -> list[TaskScore]: ...


def pooled_rate(scores: Sequence[TaskScore]) -> float:
    """Successes over episodes, all tasks together."""
    n = sum(s.episodes for s in scores)
    return sum(s.successes for s in scores) / n if n else 0.0


def paired_outcomes(candidate: Sequence[TaskScore], current: Sequence[TaskScore]) -> tuple[list[bool], list[bool]]:
    """The outcomes of (task, seed) pairs both sides played, candidate first, in a stable order.

    Example:
        >>> paired_outcomes([TaskScore("t", 1, 2, outcomes={1: True, 2: False})],
        ...                 [TaskScore("t", 1, 2, outcomes={2: True, 3: True})])
        ([False], [True])
    """
    by_task = {s.task: s.outcomes for s in current}
    cand, cur = [], []
    for score in candidate:
        other = by_task.get(score.task, {})
        for seed in sorted(set(score.outcomes) & set(other)):
            cand.append(bool(score.outcomes[seed]))
            cur.append(bool(other[seed]))
    return cand, cur


def decide_margin(candidate: Sequence[TaskScore], current: Sequence[TaskScore], margin: float) -> GateDecision:
    """Whether the candidate's pooled rate is at least the current one's minus `margin`, and why.

    Example:
        >>> decide_margin([TaskScore("t", 3, 10)], [TaskScore("t", 4, 10)], margin=0.1).reason
        'candidate 30.0% >= current 40.0% - margin 10.0%'
    """
    c, b = pooled_rate(candidate), pooled_rate(current)
    # A tiny tolerance keeps 0.3 >= 0.4 - 0.1 true in floating point.
    if c + 1e-9 >= b - margin:
        return GateDecision(True, f"candidate {c:.1%} >= current {b:.1%} - margin {margin:.1%}", "margin")
    return GateDecision(False, f"candidate {c:.1%} < current {b:.1%} - margin {margin:.1%}", "margin")


def decide_paired(
    candidate: Sequence[TaskScore], current: Sequence[TaskScore], rule: str, alpha: float
) -> GateDecision:
    """The paired rules (`not-worse`, `better`): McNemar's exact test on the seeds both sides played.

    Raises:
        GateError: no seed was played by both sides (the evaluator reports no per-seed outcomes).

    Example: the candidate wins 1 seed the current adapter loses, and loses 6 it wins; one-sided
    p = P(X >= 6), X ~ Binomial(7, 1/2) = 8/128:
        >>> d = decide_paired([TaskScore("t", 1, 7, outcomes={i: i == 0 for i in range(7)})],
        ...                   [TaskScore("t", 6, 7, outcomes={i: i != 0 for i in range(7)})], "not-worse", 0.05)
        >>> d.passed, round(d.p_value, 4)
        (True, 0.0625)
    """
    cand, cur = paired_outcomes(candidate, current)
    if not cand:
        raise GateError(
            "the gate's paired test needs per-seed outcomes from both sides on the same dev seeds, and the "
            "evaluator reported none; report TaskScore.outcomes, or set finetune.gate_rule = 'margin'"
        )
    wins = sum(1 for c, b in zip(cand, cur) if c and not b)
    losses = sum(1 for c, b in zip(cand, cur) if b and not c)
    counts = f"{wins} seeds won, {losses} lost of {len(cand)} paired"
    if rule == "better":
        p = mcnemar_p(cand, cur, alternative="greater")
        passed = p < alpha
        verdict = "significantly better" if passed else "not significantly better"
    else:
        p = mcnemar_p(cand, cur, alternative="less")
        passed = p >= alpha
        verdict = "not significantly worse" if passed else "significantly worse"
    reason = f"candidate {verdict} ({counts}; one-sided McNemar p = {p:.3g}, alpha {alpha:g})"
    return GateDecision(passed, reason, rule, p, wins, losses, len(cand))


def decide(candidate: Sequence[TaskScore], current: Sequence[TaskScore], config: FinetuneConfig) -> GateDecision:
    """The gate's decision under `config.gate_rule` (see the module docstring)."""
    if config.gate_rule == "margin":
        return decide_margin(candidate, current, config.gate_margin)
    return decide_paired(candidate, current, config.gate_rule, config.gate_alpha)


def run_gate(
    registry: AdapterRegistry,
    candidate_id: str,
    evaluator: Evaluator,
    config: FinetuneConfig,
    promote: bool = True,
    actor: str = "gate",
) -> GateRecord:
    """Evaluate a candidate against the promoted adapter of its base model; record and apply the decision.

    Args:
        registry: the adapter registry.
        candidate_id: the adapter to judge.
        evaluator: plays dev episodes (see `Evaluator`).
        config: `gate_episodes`, `gate_rule`, `gate_alpha`, `gate_margin`, `gate_tasks`.
        promote: promote a candidate that passes (False only records the decision).
        actor: who the promotion log names.

    Raises:
        GateError: a paired rule is configured and the evaluator reports no per-seed outcomes.
    """
    lineage = registry.get(candidate_id)
    tasks = list(config.gate_tasks or lineage.dataset.tasks)
    if not tasks:
        raise ValueError(f"adapter {lineage.id} names no tasks to evaluate on; set finetune.gate_tasks")
    current = registry.promoted(lineage.base_model)
    if current == lineage.id:
        raise ValueError(f"adapter {lineage.id} is already promoted")
    candidate_scores = evaluator(registry.adapter_dir(lineage.id), tasks, config.gate_episodes)
    current_scores = evaluator(registry.adapter_dir(current) if current else None, tasks, config.gate_episodes)
    decision = decide(candidate_scores, current_scores, config)
    per_task = {
        s.task: {
            "candidate": [s.successes, s.episodes],
            "current": [b.successes, b.episodes],
            "candidate_run": s.run_id,
            "current_run": b.run_id,
        }
        for s, b in zip(candidate_scores, current_scores)
    }
    record = GateRecord(
        time=time.time(),
        promoted=decision.passed and promote,
        reason=decision.reason,
        candidate_rate=pooled_rate(candidate_scores),
        current=current,
        current_rate=pooled_rate(current_scores),
        margin=config.gate_margin,
        rule=decision.rule,
        alpha=config.gate_alpha,
        p_value=decision.p_value,
        tasks=per_task,
    )
    registry.record_gate(lineage.id, record)
    if decision.passed and promote:
        registry.promote(lineage.id, reason=f"gate: {decision.reason}", actor=actor)
    return record
