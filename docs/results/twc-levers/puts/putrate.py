"""Right puts among all puts of twc evaluations, against choosing the place uniformly among the
listed puts of the same object.

    python putrate.py locmap.json RUN/episodes.jsonl ...
"""

import json
import sys

right = {k: set(v) for k, v in json.load(open(sys.argv[1])).items()}
for path in sys.argv[2:]:
    n = ok = 0
    chance = 0.0
    for line in open(path):
        step = json.loads(line)
        action = step.get("action", "")
        if step.get("event") != "step" or not action.startswith("put ") or " in " not in action:
            continue
        obj, place = action[4:].rsplit(" in ", 1)
        if obj not in right:
            continue
        puts = [a for a in step["admissible_actions"] if a.startswith(f"put {obj} in ")]
        n += 1
        ok += step["reward"] > 0 or place in right[obj]
        chance += sum(a.rsplit(" in ", 1)[1] in right[obj] for a in puts) / max(1, len(puts))
    print(f"{path}: puts {n}, right {ok} = {ok / max(1, n):.0%}, uniform choice of place {chance / max(1, n):.0%}")
