"""Right puts among all puts of twc evaluations, against choosing the place uniformly among the
listed puts of the same object.

    python putrate.py locmap.json RUN/episodes.jsonl ...
"""

import sys

from locmap import load, puts

right = load(sys.argv[1])
for path in sys.argv[2:]:
    n = ok = 0
    chance = 0.0
    for step, obj, _place, is_right in puts(path, right):
        listed = [a for a in step["admissible_actions"] if a.startswith(f"put {obj} in ")]
        n += 1
        ok += is_right
        chance += sum(a.rsplit(" in ", 1)[1] in right[obj] for a in listed) / max(1, len(listed))
    print(f"{path}: puts {n}, right {ok} = {ok / max(1, n):.0%}, uniform choice of place {chance / max(1, n):.0%}")
