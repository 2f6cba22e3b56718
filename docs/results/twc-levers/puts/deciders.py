"""Who chose each wrong put in twc evaluations (the model, memory, repeat avoidance), how the model
and memory valued the right put beside it, and how often the right place was closed instead.

    python deciders.py locmap.json RUN/episodes.jsonl
"""

import collections
import statistics
import sys

from locmap import load, puts

right = load(sys.argv[1])
counts: collections.Counter = collections.Counter()
closed: collections.Counter = collections.Counter()
rows = []
for step, obj, _place, is_right in puts(sys.argv[2], right):
    action = step["action"]
    kind = "right" if is_right else "wrong"
    counts[(kind, step["decided_by"])] += 1
    actions = ((step["extra"].get("policy") or {}).get("posterior") or {}).get("actions", {})
    good = [f"put {obj} in {p}" for p in sorted(right[obj]) if f"put {obj} in {p}" in actions]
    if kind == "wrong" and not good:
        closed[any(f"open {p}" in step.get("admissible_actions", []) for p in right[obj])] += 1
    if kind == "wrong" and good:
        chosen, best = actions[action], actions[good[0]]
        mem = lambda a: a.get("memory") or {}  # noqa: E731
        rows.append((chosen["model"], best["model"], mem(chosen).get("advantage"), mem(best).get("advantage")))
for (kind, by), n in sorted(counts.items()):
    print(f"{kind:5} puts chosen by {by}: {n}")
print(f"wrong puts with the right place closed ('open' it listed): {closed[True]}; not in the room: {closed[False]}")
if rows:
    print(f"wrong puts with the right one listed: {len(rows)}")
    print(f"  the model put the wrong one above it: {sum(r[0] > r[1] for r in rows)}")
    both = [r for r in rows if r[2] is not None and r[3] is not None]
    print(f"  memory's advantage above it: {sum(r[2] > r[3] for r in both)} of {len(both)}")
    print(
        f"  median model probability, wrong / right: {statistics.median(r[0] for r in rows):.3f} / {statistics.median(r[1] for r in rows):.3f}"
    )
