"""Who chose each wrong put in twc evaluations (the model, memory, repeat avoidance), and how the
model and memory valued the right put beside it.

    python deciders.py locmap.json RUN/episodes.jsonl
"""

import collections
import json
import statistics
import sys

right = {k: set(v) for k, v in json.load(open(sys.argv[1])).items()}
counts: collections.Counter = collections.Counter()
rows = []
for line in open(sys.argv[2]):
    step = json.loads(line)
    action = step.get("action", "")
    if step.get("event") != "step" or not action.startswith("put ") or " in " not in action:
        continue
    obj, place = action[4:].rsplit(" in ", 1)
    if obj not in right:
        continue
    kind = "right" if step["reward"] > 0 or place in right[obj] else "wrong"
    counts[(kind, step["decided_by"])] += 1
    actions = ((step["extra"].get("policy") or {}).get("posterior") or {}).get("actions", {})
    good = [f"put {obj} in {p}" for p in sorted(right[obj]) if f"put {obj} in {p}" in actions]
    if kind == "wrong" and good:
        chosen, best = actions[action], actions[good[0]]
        mem = lambda a: a.get("memory") or {}  # noqa: E731
        rows.append((chosen["model"], best["model"], mem(chosen).get("advantage"), mem(best).get("advantage")))
for (kind, by), n in sorted(counts.items()):
    print(f"{kind:5} puts chosen by {by}: {n}")
if rows:
    print(f"wrong puts with the right one listed: {len(rows)}")
    print(f"  the model put the wrong one above it: {sum(r[0] > r[1] for r in rows)}")
    both = [r for r in rows if r[2] is not None and r[3] is not None]
    print(f"  memory's advantage above it: {sum(r[2] > r[3] for r in both)} of {len(both)}")
    print(
        f"  median model probability, wrong / right: {statistics.median(r[0] for r in rows):.3f} / {statistics.median(r[1] for r in rows):.3f}"
    )
