"""At every decision where directed exploration's old condition (memory saw a listed put of the held
object fail, none succeed) does not hold but the new one does (the episode's lost points count as
failures and cancel memory's successes), where the object's right place was: behind a listed
"open PLACE" or unknown to every log ("closed"), or listed ("listed"); by how many untried listed
places there were per closed place. This chose `UNTRIED_PER_CLOSED` on dev logs.

    python ../twc-levers/puts/locmap.py ROOT > locmap.json     # where each object belongs
    python bound.py locmap.json HOME [HOME ...]                  # each HOME's newest evaluation
"""

import collections
import glob
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "twc-levers" / "explore"))
from decisions import evidence  # noqa: E402


def put_decisions(home: str) -> Iterator[tuple[dict, str, list[str], list[str]]]:
    """(the posterior's record, object, its listed puts, the closed places' openings) at each decision
    of HOME's newest evaluation where the object has two listed puts or more and something is closed."""
    path = sorted(glob.glob(f"{home}/evals/*/episodes.jsonl"), key=os.path.getmtime)[-1]
    for line in open(path):
        step = json.loads(line)
        if step["event"] != "step":
            continue
        post = ((step.get("extra") or {}).get("policy") or {}).get("posterior") or {}
        puts = [a for a in post.get("actions", {}) if a.startswith("put ") and " in " in a]
        targets = {a.rsplit(" in ", 1)[1] for a in puts}
        closed = [a for a in post.get("actions", {}) if a.startswith("open ") and a[5:] not in targets]
        for obj in {a[4:].rsplit(" in ", 1)[0] for a in puts}:
            group = [a for a in puts if a.startswith(f"put {obj} in ")]
            if len(group) >= 2 and closed:
                yield post, obj, group, closed


def memory_alone_asks(post: dict, group: list[str]) -> bool:
    """Directed exploration's condition before stop 61: memory saw some listed put fail, none succeed."""
    ev = [evidence(post["actions"][a]) for a in group]
    return any(n for _, n in ev) and not any(k for k, _ in ev)


def main(locmap: str, homes: list[str]) -> None:
    right = {k: set(v) for k, v in json.load(open(locmap)).items()}
    table: collections.Counter = collections.Counter()
    for home in homes:
        for post, obj, group, closed in put_decisions(home):
            actions, lost = post["actions"], set(post.get("punished", []))
            ev = {a: evidence(actions[a]) for a in group}
            new = any(ev[a][1] or a in lost for a in group) and not any(ev[a][0] for a in group if a not in lost)
            if memory_alone_asks(post, group) or not new:
                continue
            if obj in right and any(f"put {obj} in {p}" in actions for p in right[obj]):
                where = "listed"
            else:
                where = "closed"
            untried = len(group) - len(lost & set(group))
            for per_closed in (0.5, 1, 2, None):
                if per_closed is None or untried <= per_closed * len(closed):
                    table[per_closed, where] += 1
    print("untried per closed place at most  right place closed  right place listed")
    for per_closed in (0.5, 1, 2, None):
        bound = "no bound" if per_closed is None else per_closed
        print(f"{bound!s:33}  {table[per_closed, 'closed']:18}  {table[per_closed, 'listed']}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
