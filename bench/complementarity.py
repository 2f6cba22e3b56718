"""Are the model and the memory complementary? Paired comparisons of the expert-iteration arms.

Reads the evaluation rows of `bench.finetune_bench --expert-iteration` (its stage log), each
holding per-seed outcomes on the same dev seeds, and for every trained adapter compares

    adapter + memory   against   adapter alone   and   base model + memory (same bank)

with exact McNemar tests (two-sided, and one-sided "adapter + memory is better"), 95% Wilson
intervals, invalid-action rates and time per decision. The issue's target: adapter + memory
at least 5 points above the better of the two, with one-sided p < 0.05.

Seeds can repeat games (`crl.tasks.game_identity`; twc's 96 dev seeds are 78 games). With
`--games` each seed's game is learned by resetting the task's environment on it, every paired
test is repeated on distinct games (each once, by its lowest seed; keys `games_*`), and the
verdict needs the margin and the tests to hold on games as well.

    python -m bench.complementarity WORKDIR/expert-iteration.jsonl [--games] [--json]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from crl.agent.run_compare import distinct_games
from crl.tasks.evaluation import discordant, mcnemar_p, wilson_interval

TARGET_MARGIN = 0.05


def eval_rows(path: Path) -> dict[str, dict[str, Any]]:
    """The latest row of each evaluation stage that recorded per-seed outcomes, by stage name."""
    rows: dict[str, dict[str, Any]] = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            if row["stage"].startswith("eval ") and row.get("outcomes"):
                rows[row["stage"]] = row
    return rows


def _tests(a: dict[str, Any], b: dict[str, Any], seeds: list[str]) -> dict[str, Any]:
    xa = [bool(a["outcomes"][s]) for s in seeds]
    xb = [bool(b["outcomes"][s]) for s in seeds]
    a_only, b_only = discordant(xa, xb)
    return {
        "a_only": a_only,
        "b_only": b_only,
        "difference": (sum(xa) - sum(xb)) / len(seeds) if seeds else 0.0,
        "p_two_sided": mcnemar_p(xa, xb),
        "p_greater": mcnemar_p(xa, xb, "greater"),
    }


def paired(a: dict[str, Any], b: dict[str, Any], games: dict[str, str] | None = None) -> dict[str, Any]:
    """McNemar on the seeds both rows played: counts of discordant seeds and p-values; with `games`
    (seed -> game) the same on distinct games, each counted by its lowest seed (keys `games_*`)."""
    seeds = sorted(set(a["outcomes"]) & set(b["outcomes"]), key=int)
    out = {"seeds": len(seeds)} | _tests(a, b, seeds)
    if games is not None:
        keys = distinct_games([(0, int(s)) for s in seeds], {(0, int(s)): g for s, g in games.items()})
        distinct = [str(seed) for _, seed in keys]
        out |= {"games": len(distinct)} | {f"games_{k}": v for k, v in _tests(a, b, distinct).items()}
    return out


def identify_games(rows: dict[str, dict[str, Any]]) -> dict[str, str]:
    """seed -> game for every seed the rows played, by resetting the task's environment on it (a seed
    whose game will not start or whose environment cannot say is left out, and counts as its own game)."""
    from crl.tasks.game_identity import game_at
    from crl.tasks.registry import make_env

    tasks = {row["task"] for row in rows.values() if row.get("task")}
    if len(tasks) != 1:
        raise SystemExit(f"--games needs the rows of one task (found {sorted(tasks) or 'none'})")
    env = make_env(tasks.pop())
    games = {}
    try:
        for seed in sorted({s for row in rows.values() for s in row["outcomes"]}, key=int):
            game = game_at(env, int(seed))
            if game:
                games[seed] = game
    finally:
        env.close()
    return games


def arm(row: dict[str, Any]) -> dict[str, Any]:
    """One arm's success with its interval and the per-decision figures."""
    lo, hi = wilson_interval(row["successes"], row["episodes"])
    keep = ("invalid_rate", "ms_per_decision", "decided_by", "override_rate", "override_win_rate")
    return {"stage": row["stage"], "successes": row["successes"], "episodes": row["episodes"], "ci95": [lo, hi]} | {
        k: row[k] for k in keep if k in row
    }


def compare(rows: dict[str, dict[str, Any]], games: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """For each adapter evaluated both alone and with memory, the three arms and the paired tests
    (also on distinct games, with `games`: seed -> game).

    The base-with-memory arm is the one evaluated on the bank the adapter was evaluated on:
    `eval base round N memory=True` for an adapter of round N (round 1: `eval base memory=True`),
    the latest one for the DPO adapter.
    """
    bases = {1: rows.get("eval base memory=True")}
    for stage, row in rows.items():
        parts = stage.split()
        if parts[:3] == ["eval", "base", "round"]:
            bases[int(parts[3])] = row
    out = []
    for stage, with_memory in rows.items():
        name = stage.removeprefix("eval ").removesuffix(" memory=True")
        if not stage.endswith("memory=True") or name.startswith("base") or name == "random":
            continue
        alone = rows.get(f"eval {name} memory=False")
        round_no = int(name.split()[1]) if name.startswith("sft ") else max(k for k, v in bases.items() if v)
        base_memory = bases.get(round_no)
        if alone is None or base_memory is None:
            continue
        vs_alone = paired(with_memory, alone, games)
        vs_base = paired(with_memory, base_memory, games)
        best_other = max(alone["successes"] / alone["episodes"], base_memory["successes"] / base_memory["episodes"])
        margin = with_memory["successes"] / with_memory["episodes"] - best_other
        holds = margin >= TARGET_MARGIN and vs_alone["p_greater"] < 0.05 and vs_base["p_greater"] < 0.05
        found = {
            "adapter": name,
            "adapter_alone": arm(alone),
            "base_memory": arm(base_memory),
            "adapter_memory": arm(with_memory),
            "vs_adapter_alone": vs_alone,
            "vs_base_memory": vs_base,
            "margin_over_best": margin,
        }
        if games is not None:
            game_margin = min(vs_alone["games_difference"], vs_base["games_difference"])
            found["games_margin_over_best"] = game_margin
            holds = (
                holds
                and game_margin >= TARGET_MARGIN
                and vs_alone["games_p_greater"] < 0.05
                and vs_base["games_p_greater"] < 0.05
            )
        out.append(found | {"complementary": holds})
    return out


def _pct(a: dict[str, Any]) -> str:
    lo, hi = a["ci95"]
    return f"{a['successes']}/{a['episodes']} = {a['successes'] / a['episodes']:.0%} ({lo:.0%}-{hi:.0%})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log", type=Path, help="the expert-iteration.jsonl of a --workdir")
    ap.add_argument("--games", action="store_true", help="also test on distinct games (resets the task's environment)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = eval_rows(args.log)
    result = compare(rows, identify_games(rows) if args.games else None)
    if args.json:
        print(json.dumps({"arms": {k: arm(v) for k, v in rows.items()}, "comparisons": result}, indent=2))
        return
    for stage, row in rows.items():
        a = arm(row)
        extra = ", ".join(f"{k} {a[k]}" for k in ("invalid_rate", "ms_per_decision", "override_rate") if k in a)
        print(f"{stage:40s} {_pct(a)}  {extra}")
    for c in result:
        print(
            f"\n{c['adapter']}: adapter+memory {_pct(c['adapter_memory'])} vs adapter alone "
            f"{_pct(c['adapter_alone'])} (p> {c['vs_adapter_alone']['p_greater']:.3g}, two-sided "
            f"{c['vs_adapter_alone']['p_two_sided']:.3g}) vs base+memory {_pct(c['base_memory'])} "
            f"(p> {c['vs_base_memory']['p_greater']:.3g}, two-sided {c['vs_base_memory']['p_two_sided']:.3g}); "
            f"margin over the better {c['margin_over_best']:+.0%}"
            + (
                f"; on {c['vs_base_memory']['games']} distinct games {c['games_margin_over_best']:+.0%} "
                f"(p> {c['vs_adapter_alone']['games_p_greater']:.3g} and {c['vs_base_memory']['games_p_greater']:.3g})"
                if "games_margin_over_best" in c
                else ""
            )
            + ": "
            + ("complementary" if c["complementary"] else "NOT complementary (target: +5 points, p < 0.05)")
        )


if __name__ == "__main__":
    main()
