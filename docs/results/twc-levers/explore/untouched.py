"""Games in which directed exploration never offered an action must play exactly as without it:
compare each such game's actions with the same seed's game in the baseline run.

    python untouched.py EXPLORE/episodes.jsonl BASELINE/episodes.jsonl
"""

import json
import sys


def games(path: str) -> dict[int, tuple[list[str], bool]]:
    """seed -> (actions, whether any step offered an action by directed exploration)."""
    out: dict[str, tuple[list[str], bool]] = {}
    seeds: dict[str, int] = {}
    for line in open(path):
        rec = json.loads(line)
        if rec.get("event") == "start":
            seeds[rec["episode_id"]] = rec["seed"]
        if rec.get("event") != "step":
            continue
        actions, touched = out.setdefault(rec["episode_id"], ([], False))
        posterior = (rec["extra"].get("policy") or {}).get("posterior") or {}
        actions.append(rec["action"])
        out[rec["episode_id"]] = (actions, touched or bool(posterior.get("explored")))
    return {seeds[e]: v for e, v in out.items()}


explore, base = games(sys.argv[1]), games(sys.argv[2])
untouched = [s for s, (_, touched) in explore.items() if not touched]
same = [s for s in untouched if explore[s][0] == base[s][0]]
print(
    f"{len(explore)} games, {len(untouched)} never offered an exploration; of those, {len(same)} played as the baseline"
)
