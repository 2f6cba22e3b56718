"""Runs played on the same seeds, compared seed by seed (`crl compare`).

Two settings judged on the same seeds differ on fewer seeds than their success rates suggest, and
only those seeds (won by one, lost by the other) carry evidence. Each run gives its outcome per
seed; each pair of runs gets an exact McNemar test on the seeds both finished, with the counts of
seeds only one of them won. A seed a run played more than once (retries) counts with its first
finished episode; episodes that ended in an environment error count for neither side.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from itertools import combinations
from typing import Any

from crl.memory.trajectory import Episode
from crl.tasks.evaluation import discordant, mcnemar_p, wilson_interval


@dataclass
class RunOutcomes:
    """One run's outcome per seed.

    Attributes:
        label: the name it is shown under (its run id unless the user named it).
        run_id / task / model / kind: from its `run.json`.
        outcomes: seed -> whether its first finished episode on that seed succeeded.
        points: seed -> sub-goals that episode reached (score points on TextWorldExpress).
        errored: episodes that ended in an environment error (left out).
        unfinished: episodes still running, or cut by a crash (left out).
    """

    label: str
    run_id: str
    task: str
    model: str
    kind: str
    outcomes: dict[int, bool] = field(default_factory=dict)
    points: dict[int, int] = field(default_factory=dict)
    errored: int = 0
    unfinished: int = 0

    @property
    def successes(self) -> int:
        return sum(self.outcomes.values())

    def summary(self) -> dict[str, Any]:
        """The run's row: seeds finished, successes, success rate with its 95% interval, mean points,
        and the outcome per seed (for pooling runs of several repeats)."""
        n = len(self.outcomes)
        lo, hi = wilson_interval(self.successes, n) if n else (0.0, 0.0)
        row = {k: v for k, v in asdict(self).items() if k not in ("outcomes", "points")}
        return row | {
            "seeds": n,
            "successes": self.successes,
            "success_rate": self.successes / n if n else 0.0,
            "ci95": [lo, hi],
            "mean_points": sum(self.points.values()) / n if n else 0.0,
            "outcomes": {str(seed): won for seed, won in sorted(self.outcomes.items())},
        }


def run_outcomes(label: str, run_id: str, task: str, model: str, kind: str, episodes: list[Episode]) -> RunOutcomes:
    """`episodes` of one run reduced to one outcome per seed (its first finished episode there)."""
    run = RunOutcomes(label, run_id, task, model, kind)
    for episode in sorted(episodes, key=lambda e: e.episode_id):
        if not episode.finished:
            run.unfinished += 1
        elif episode.status == "error":
            run.errored += 1
        elif episode.seed not in run.outcomes:
            run.outcomes[episode.seed] = bool(episode.success)
            run.points[episode.seed] = sum(1 for reached in episode.subgoals.values() if reached)
    return run


def pair(a: RunOutcomes, b: RunOutcomes) -> dict[str, Any]:
    """`a` against `b` on the seeds both finished: each one's wins there, the seeds only one won,
    the difference in success rate, and exact McNemar p-values (two-sided, and "a is better")."""
    seeds = sorted(set(a.outcomes) & set(b.outcomes))
    xa = [a.outcomes[s] for s in seeds]
    xb = [b.outcomes[s] for s in seeds]
    a_only, b_only = discordant(xa, xb)
    return {
        "a": a.label,
        "b": b.label,
        "seeds": len(seeds),
        "a_successes": sum(xa),
        "b_successes": sum(xb),
        "a_only": a_only,
        "b_only": b_only,
        "difference": (sum(xa) - sum(xb)) / len(seeds) if seeds else None,
        "p_two_sided": mcnemar_p(xa, xb) if seeds else None,
        "p_a_better": mcnemar_p(xa, xb, "greater") if seeds else None,
    }


def check_same_task(runs: list[RunOutcomes]) -> None:
    """Refuse runs of different tasks: the same seed is then a different world, and pairing them
    compares nothing."""
    tasks = {r.task for r in runs}
    if len(tasks) > 1:
        listed = ", ".join(f"{r.label}: {r.task}" for r in runs)
        raise ValueError(f"the runs play different tasks, so their seeds are different worlds ({listed})")


def compare_runs(runs: list[RunOutcomes], all_pairs: bool = False) -> dict[str, Any]:
    """Every run's row, and the paired tests: each later run against the first (the baseline), or
    every pair with `all_pairs`."""
    if len(runs) < 2:
        raise ValueError("compare needs at least two runs")
    check_same_task(runs)
    labels = [r.label for r in runs]
    if len(set(labels)) < len(labels):
        raise ValueError(f"two runs have the same label ({', '.join(labels)}): name them LABEL=RUN")
    couples = combinations(runs, 2) if all_pairs else ((runs[0], r) for r in runs[1:])
    return {"task": runs[0].task, "runs": [r.summary() for r in runs], "pairs": [pair(a, b) for a, b in couples]}
