"""The promotion gate: a candidate adapter is promoted only if it is not worse than the current one.

Both sides play the same dev-fold seeds of the tasks the candidate was trained on; the
pooled success rates are compared, and the candidate wins when

    candidate_rate >= current_rate - margin

The decision and every number behind it go into the candidate's lineage, and into the
promotion log when it is promoted. Playing episodes is the agent's business, so the gate
takes an `Evaluator` (the CLI passes one built on `agent.app.start_run`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from finetune.config import FinetuneConfig
from finetune.registry import AdapterRegistry, GateRecord


@dataclass
class TaskScore:
    """Successes of one side on one task's dev seeds."""

    task: str
    successes: int
    episodes: int
    run_id: str | None = None

    @property
    def rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0


class Evaluator(Protocol):
    """Plays `episodes` dev-fold episodes of each task with the base model plus `adapter` (None: no adapter)."""

    def __call__(self, adapter: Path | None, tasks: Sequence[str], episodes: int) -> list[TaskScore]: ...


def pooled_rate(scores: Sequence[TaskScore]) -> float:
    """Successes over episodes, all tasks together."""
    n = sum(s.episodes for s in scores)
    return sum(s.successes for s in scores) / n if n else 0.0


def decide(candidate: Sequence[TaskScore], current: Sequence[TaskScore], margin: float) -> tuple[bool, str]:
    """Whether the candidate's pooled rate is at least the current one's minus `margin`, and why.

    Example:
        >>> decide([TaskScore("t", 3, 10)], [TaskScore("t", 4, 10)], margin=0.1)
        (True, 'candidate 30.0% >= current 40.0% - margin 10.0%')
    """
    c, b = pooled_rate(candidate), pooled_rate(current)
    # A tiny tolerance keeps 0.3 >= 0.4 - 0.1 true in floating point.
    if c + 1e-9 >= b - margin:
        return True, f"candidate {c:.1%} >= current {b:.1%} - margin {margin:.1%}"
    return False, f"candidate {c:.1%} < current {b:.1%} - margin {margin:.1%}"


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
        config: `gate_episodes`, `gate_margin`, `gate_tasks`.
        promote: promote a candidate that passes (False only records the decision).
        actor: who the promotion log names.
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
    passed, reason = decide(candidate_scores, current_scores, config.gate_margin)
    per_task = {
        s.task: {"candidate": [s.successes, s.episodes], "current": [b.successes, b.episodes],
                 "candidate_run": s.run_id, "current_run": b.run_id}
        for s, b in zip(candidate_scores, current_scores)
    }
    record = GateRecord(
        time=time.time(),
        promoted=passed and promote,
        reason=reason,
        candidate_rate=pooled_rate(candidate_scores),
        current=current,
        current_rate=pooled_rate(current_scores),
        margin=config.gate_margin,
        tasks=per_task,
    )
    registry.record_gate(lineage.id, record)
    if passed and promote:
        registry.promote(lineage.id, reason=f"gate: {reason}", actor=actor)
    return record
