"""Where the rule's run and the baseline's part ways: for each seed, the first step at which their
actions differ, and whether directed exploration offered an action there in the rule's run. Every
game that parts ways should part at such an offer (the rule changes nothing else).

    python diverge.py RULE/episodes.jsonl BASELINE/episodes.jsonl
"""

import collections
import json
import sys


def games(path: str) -> dict[int, list[dict]]:
    """seed -> the game's steps."""
    seeds: dict[str, int] = {}
    steps: dict[str, list[dict]] = collections.defaultdict(list)
    for line in open(path):
        rec = json.loads(line)
        if rec["event"] == "start":
            seeds[rec["episode_id"]] = rec["seed"]
        elif rec["event"] == "step":
            steps[rec["episode_id"]].append(rec)
    return {seeds[e]: s for e, s in steps.items()}


def main(rule: str, baseline: str) -> None:
    new, old = games(rule), games(baseline)
    counts: collections.Counter = collections.Counter()
    for seed, steps in sorted(new.items()):
        before = [s["action"] for s in old[seed]]
        after = [s["action"] for s in steps]
        if after == before:
            counts["same"] += 1
            continue
        i = next((i for i, (a, b) in enumerate(zip(after, before)) if a != b), min(len(after), len(before)))
        posterior = ((steps[i]["extra"].get("policy") or {}).get("posterior") or {}) if i < len(steps) else {}
        counts["parted at an exploration offer" if posterior.get("explored") else "parted elsewhere"] += 1
        if not posterior.get("explored"):
            print(f"seed {seed} parted at step {i}: {after[i : i + 1]} against {before[i : i + 1]}")
    print(dict(counts))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
