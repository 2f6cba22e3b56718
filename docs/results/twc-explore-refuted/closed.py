"""Puts of an evaluation by where the object's right place was (L: a listed put; C: behind a
listed "open PLACE"; N: neither), whether this episode had already lost a point on a put of the same
object, and whether the put was right. Objects no log ever placed right are left out.

    python ../twc-levers/puts/locmap.py ROOT > locmap.json
    python closed.py locmap.json HOME [HOME ...]      # each HOME's newest evaluation
"""

import collections
import glob
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "twc-levers" / "puts"))
from locmap import load, puts  # noqa: E402


def main(locmap: str, homes: list[str]) -> None:
    right = load(locmap)
    for home in homes:
        path = sorted(glob.glob(f"{home}/evals/*/episodes.jsonl"), key=os.path.getmtime)[-1]
        table: collections.Counter = collections.Counter()
        refuted: collections.Counter = collections.Counter()
        for step, obj, _place, _is_right in puts(path, right):
            listed = step["admissible_actions"]
            if any(f"put {obj} in {p}" in listed for p in right[obj]):
                where = "L"
            else:
                where = "C" if any(f"open {p}" in listed for p in right[obj]) else "N"
            won = step["reward"] > 0
            table[where, refuted[step["episode_id"], obj] > 0, "right" if won else "wrong"] += 1
            refuted[step["episode_id"], obj] += not won
        print(home)
        for (where, after, outcome), n in sorted(table.items()):
            print(f"  right place {where}  after a refutation {str(after):5}  {outcome:5}  {n}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
