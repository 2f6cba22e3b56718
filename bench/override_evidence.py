"""Where memory's overrides help and where they hurt: one arm with memory against the same actor alone.

Reads two run logs played on the same seeds (e.g. an expert-iteration workdir's
`.crl/evals/<run>/episodes.jsonl` of "adapter + memory" and of "adapter alone"), splits the
seeds by their paired outcome (memory won a seed the actor alone lost, lost one it won, both
won, both lost), and for each group counts the posterior's overrides of the model's argmax by
the evidence behind them:

    untried     memory valued an action no close stored step took (the optimism term)
    thin        the model's choice was demoted on at most one stored sample of it
    supported   both the chosen action and the model's choice had >= 3 stored samples

so a missed complementarity target can be traced to the kind of evidence that misleads. Each
group also gives the median probability the model put on its own choice where memory overrode
it (`model_p_median`): a flat prior (a fine-tuned model whose argmax wins most games while
giving it a third of the mass) is overridden on thin evidence.

    python -m bench.override_evidence WITH_MEMORY/episodes.jsonl ALONE/episodes.jsonl [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from crl.memory.storage.episode_log import read_episodes
from crl.memory.trajectory import Episode

GROUPS = {
    (True, False): "memory won, alone lost",
    (False, True): "memory lost, alone won",
    (True, True): "both won",
    (False, False): "both lost",
}


def evidence_kind(decision: dict[str, Any]) -> str:
    """'untried', 'thin', 'supported' or 'other' for one posterior decision that overrode the model."""
    actions = decision["actions"]
    chosen = actions[decision["chosen"]].get("memory") or {}
    model_best = actions[decision["model_best"]].get("memory") or {}
    if chosen.get("n", 0) == 0:
        return "untried"
    if model_best and model_best.get("n", 0) <= 1:
        return "thin"
    if chosen.get("n", 0) >= 3 and model_best.get("n", 0) >= 3:
        return "supported"
    return "other"


def _outcomes(path: Path) -> dict[int, Episode]:
    return {e.seed: e for e in read_episodes(path) if e.status != "running"}


def _posteriors(episode: Episode) -> list[dict[str, Any]]:
    return [s.extra.policy.posterior for s in episode.steps if s.extra.policy and s.extra.policy.posterior]


def compare_overrides(with_memory: Path, alone: Path) -> dict[str, Any]:
    """Per paired-outcome group: seeds, seeds with an override, overrides by evidence kind."""
    mem, solo = _outcomes(with_memory), _outcomes(alone)
    seeds = sorted(set(mem) & set(solo))
    table: dict[str, dict[str, Any]] = {
        g: {"seeds": 0, "seeds_with_override": 0, "overrides": Counter(), "model_p": []} for g in GROUPS.values()
    }
    for seed in seeds:
        group = GROUPS[mem[seed].success, solo[seed].success]
        overrides = [d for d in _posteriors(mem[seed]) if d.get("memory_changed_argmax")]
        row = table[group]
        row["seeds"] += 1
        row["seeds_with_override"] += bool(overrides)
        row["overrides"].update(evidence_kind(d) for d in overrides)
        row["model_p"].extend(d["actions"][d["model_best"]]["model"] for d in overrides)
    return {
        "paired_seeds": len(seeds),
        "groups": {
            g: {k: v for k, v in r.items() if k != "model_p"}
            | {
                "overrides": dict(r["overrides"]),
                "model_p_median": round(statistics.median(r["model_p"]), 3) if r["model_p"] else None,
            }
            for g, r in table.items()
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("with_memory", type=Path, help="episodes.jsonl of the arm with memory")
    ap.add_argument("alone", type=Path, help="episodes.jsonl of the same actor without memory, same seeds")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result = compare_overrides(args.with_memory, args.alone)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"{result['paired_seeds']} paired seeds")
    print(f"{'group':26s} {'seeds':>5s} {'overridden':>10s} {'model p':>7s}  overrides by evidence")
    for group, row in result["groups"].items():
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(row["overrides"].items())) or "-"
        p = "-" if row["model_p_median"] is None else f"{row['model_p_median']:.2f}"
        print(f"{group:26s} {row['seeds']:5d} {row['seeds_with_override']:10d} {p:>7s}  {kinds}")


if __name__ == "__main__":
    main()
