"""At each put of an evaluation, whether memory had seen some listed put of the held object fail and
none succeed (the condition `agent.posterior.explore_enabling` acts on), against where the object
belonged: listed (L), behind a listed "open PLACE" (C), or neither (N).

    python decisions.py ../puts/locmap.json HOME [HOME ...]     # each HOME's newest evaluation
"""

import collections
import glob
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "puts"))
from locmap import load, puts  # noqa: E402


def evidence(entry: dict) -> tuple[int, int]:
    """(successes, votes) of memory's evidence on one action, read off its hint."""
    m = re.search(r"success (\d+) of (\d+)", (entry.get("memory") or {}).get("hint", ""))
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def main(locmap: str, homes: list[str]) -> None:
    right = load(locmap)
    table: collections.Counter = collections.Counter()
    for home in homes:
        path = sorted(glob.glob(f"{home}/evals/*/episodes.jsonl"))[-1]
        for step, obj, _place, is_right in puts(path, right):
            actions = ((step["extra"].get("policy") or {}).get("posterior") or {}).get("actions", {})
            listed = [evidence(actions[a]) for a in actions if a.startswith(f"put {obj} in ")]
            if any(f"put {obj} in {p}" in actions for p in right[obj]):
                where = "L"
            else:
                where = "C" if any(f"open {p}" in actions for p in right[obj]) else "N"
            fires = any(n for _, n in listed) and not any(k for k, _ in listed)
            table[(where, fires, is_right)] += 1
    print("right place  memory saw listed puts fail, none succeed  put  count")
    for (where, fires, is_right), n in sorted(table.items()):
        print(f"{where:11}  {str(fires):43}  {'right' if is_right else 'wrong':5}  {n}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
