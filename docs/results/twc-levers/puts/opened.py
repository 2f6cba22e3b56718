"""How often twc training put objects into places it had to open first, against places open from
the start, and how many of those puts scored.

    python opened.py HOME [HOME ...]     # each HOME's runs/*/episodes.jsonl (a bank's training logs)
"""

import collections
import glob
import json
import sys

for root in sys.argv[1:]:
    counts: collections.Counter = collections.Counter()
    for path in glob.glob(f"{root}/runs/*/episodes.jsonl"):
        opened: dict[str, set[str]] = {}
        for line in open(path):
            step = json.loads(line)
            if step.get("event") != "step":
                continue
            episode, action = step["episode_id"], step["action"]
            if action.startswith("open "):
                opened.setdefault(episode, set()).add(action[5:])
                counts["open actions"] += 1
            if action.startswith("put ") and " in " in action:
                place = action[4:].rsplit(" in ", 1)[1]
                where = "opened in the episode" if place in opened.get(episode, set()) else "open from the start"
                counts[f"puts into a place {where}, {'scored' if step['reward'] > 0 else 'not scored'}"] += 1
    print(root)
    for key, n in sorted(counts.items()):
        print(f"  {key}: {n}")
