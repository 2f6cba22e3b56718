"""Runs played on the same seeds, compared seed by seed (`crl compare`).

Two settings judged on the same seeds differ on fewer seeds than their success rates suggest, and
only those seeds (won by one, lost by the other) carry evidence. Each run gives its outcome per
seed; each pair of runs gets an exact McNemar test on the seeds both finished, with the counts of
seeds only one of them won. A seed a run played more than once (retries) counts with its first
finished episode; episodes that ended in an environment error count for neither side. Several runs
of one setting (repeats, each with its own bank or adapter) pool under one label: the i-th run of
one label pairs with the i-th of another, seed by seed.

Seeds can repeat games (`crl.tasks.game_identity`: twc with one room has 78 distinct games among
96 dev seeds). Where the runs logged which game each seed started, every pair is also tested on
distinct games: each game counts once, by the outcome of its lowest paired seed, so six seeds of
one game are one trial, not six.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from itertools import combinations
from typing import TYPE_CHECKING, Any

from crl.memory.trajectory import Episode
from crl.tasks.evaluation import discordant, mcnemar_p, wilson_interval

if TYPE_CHECKING:
    from crl.agent.runs import RunStore

Key = tuple[int, int]
"""(repeat, seed): a run's place among the runs pooled under one label (0 for a single run), and the seed."""


@dataclass
class RunOutcomes:
    """The outcome per seed of one run, or of several runs pooled as repeats under one label.

    Attributes:
        label: the name it is shown under (its run id unless the user named it).
        run_ids / task / model / kind: from the runs' `run.json` (the models of pooled runs joined).
        outcomes: (repeat, seed) -> whether its first finished episode on that seed succeeded.
        points: (repeat, seed) -> sub-goals that episode reached (score points on TextWorldExpress).
        games: (repeat, seed) -> the game that seed started, where the episode logged it.
        errored: episodes that ended in an environment error (left out).
        unfinished: episodes still running, or cut by a crash (left out).
    """

    label: str
    run_ids: list[str]
    task: str
    model: str
    kind: str
    outcomes: dict[Key, bool] = field(default_factory=dict)
    points: dict[Key, int] = field(default_factory=dict)
    games: dict[Key, str] = field(default_factory=dict)
    errored: int = 0
    unfinished: int = 0

    @property
    def successes(self) -> int:
        return sum(self.outcomes.values())

    def summary(self) -> dict[str, Any]:
        """The row: seeds finished, successes, success rate with its 95% interval, mean points, and
        the outcome per seed (`"seed"`, or `"repeat:seed"` for pooled runs)."""
        n = len(self.outcomes)
        lo, hi = wilson_interval(self.successes, n) if n else (0.0, 0.0)
        row = {k: v for k, v in asdict(self).items() if k not in ("outcomes", "points", "games")}
        pooled = len(self.run_ids) > 1
        return row | {
            "run_id": ", ".join(self.run_ids),
            "seeds": n,
            "successes": self.successes,
            "success_rate": self.successes / n if n else 0.0,
            "ci95": [lo, hi],
            "mean_points": sum(self.points.values()) / n if n else 0.0,
            "games": len(distinct_games(sorted(self.outcomes), self.games)),
            "outcomes": {
                (f"{repeat}:{seed}" if pooled else str(seed)): won
                for (repeat, seed), won in sorted(self.outcomes.items())
            },
        }


def run_outcomes(label: str, run_id: str, task: str, model: str, kind: str, episodes: list[Episode]) -> RunOutcomes:
    """`episodes` of one run reduced to one outcome per seed (its first finished episode there)."""
    run = RunOutcomes(label, [run_id], task, model, kind)
    for episode in sorted(episodes, key=lambda e: e.episode_id):
        if not episode.finished:
            run.unfinished += 1
        elif episode.status == "error":
            run.errored += 1
        elif (0, episode.seed) not in run.outcomes:
            run.outcomes[(0, episode.seed)] = bool(episode.success)
            run.points[(0, episode.seed)] = sum(1 for reached in episode.subgoals.values() if reached)
            if episode.game:
                run.games[(0, episode.seed)] = episode.game
    return run


def stored_run_outcomes(store: RunStore, run_id: str) -> RunOutcomes:
    """Run `run_id` of `store` reduced to one outcome per seed, labelled by its id."""
    info = store.load(run_id)
    return run_outcomes(run_id, run_id, info.task, info.model, info.kind, store.episodes(run_id))


def pooled(label: str, runs: list[RunOutcomes]) -> RunOutcomes:
    """Several runs of one setting (repeats: other banks, adapters or train seeds) as one row; run i
    is repeat i, and pairs with the i-th run of another label."""
    if len(runs) == 1:
        return replace(runs[0], label=label)
    check_same_task(runs)
    models = list(dict.fromkeys(r.model for r in runs))
    out = RunOutcomes(label, [i for r in runs for i in r.run_ids], runs[0].task, ", ".join(models), runs[0].kind)
    for repeat, run in enumerate(runs):
        out.outcomes |= {(repeat, seed): won for (_, seed), won in run.outcomes.items()}
        out.points |= {(repeat, seed): n for (_, seed), n in run.points.items()}
        out.games |= {(repeat, seed): g for (_, seed), g in run.games.items()}
        out.errored += run.errored
        out.unfinished += run.unfinished
    return out


def distinct_games(keys: list[Key], *games: dict[Key, str]) -> list[Key]:
    """The first (lowest) of `keys` for each distinct (repeat, game): a key no map names a game for
    is a game of its own. `keys` must be sorted."""
    first: dict[tuple[int, str], Key] = {}
    for key in keys:
        game = next((g[key] for g in games if key in g), None)
        first.setdefault((key[0], game) if game else (key[0], f"seed:{key[1]}"), key)
    return sorted(first.values())


def _paired(a: RunOutcomes, b: RunOutcomes, keys: list[Key]) -> dict[str, Any]:
    xa = [a.outcomes[k] for k in keys]
    xb = [b.outcomes[k] for k in keys]
    a_only, b_only = discordant(xa, xb)
    return {
        "a_successes": sum(xa),
        "b_successes": sum(xb),
        "a_only": a_only,
        "b_only": b_only,
        "difference": (sum(xa) - sum(xb)) / len(keys) if keys else None,
        "p_two_sided": mcnemar_p(xa, xb) if keys else None,
        "p_a_better": mcnemar_p(xa, xb, "greater") if keys else None,
    }


def pair(a: RunOutcomes, b: RunOutcomes) -> dict[str, Any]:
    """`a` against `b` on the (repeat, seed) pairs both finished: each one's wins there, the seeds
    only one won, the difference in success rate, and exact McNemar p-values (two-sided, and "a is
    better"); then the same on distinct games (`distinct_games`, keys prefixed `games_`), which
    equal the seed figures when no two paired seeds started the same game."""
    seeds = sorted(set(a.outcomes) & set(b.outcomes))
    games = distinct_games(seeds, a.games, b.games)
    by_game = {f"games_{k}": v for k, v in _paired(a, b, games).items()}
    return {"a": a.label, "b": b.label, "seeds": len(seeds)} | _paired(a, b, seeds) | {"games": len(games)} | by_game


def fill_games(runs: list[RunOutcomes], identify: Callable[[int], str | None]) -> int:
    """Give every seed whose episode logged no game the game `identify(seed)` names (runs logged
    before episodes recorded their game); returns how many seeds were filled. Seeds shared by
    several runs are identified once."""
    known: dict[int, str | None] = {}
    filled = 0
    for run in runs:
        for key in sorted(set(run.outcomes) - set(run.games)):
            if key[1] not in known:
                known[key[1]] = identify(key[1])
            if known[key[1]]:
                run.games[key] = known[key[1]]
                filled += 1
    return filled


def check_same_task(runs: list[RunOutcomes]) -> None:
    """Refuse runs of different tasks: the same seed is then a different world, and pairing them
    compares nothing."""
    tasks = {r.task for r in runs}
    if len(tasks) > 1:
        listed = ", ".join(f"{r.label or r.run_ids[0]}: {r.task}" for r in runs)
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
