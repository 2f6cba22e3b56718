"""Decisions where memory's failures alone asked for an opening (directed exploration's condition
before dc6120f) and the episode had also refuted one of those uses: whether the rule offered there.
At dc6120f the bound could withhold the offer in that case; 84b1408 offers as before.

    python regress.py HOME [HOME ...]      # each HOME's newest evaluation
"""

import collections
import glob
import json
import os
import re
import sys


def ev(e):
    m = re.search(r"success (\d+) of (\d+)", (e.get("memory") or {}).get("hint", "") or "")
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


for home in sys.argv[1:]:
    path = sorted(glob.glob(f"{home}/evals/*/episodes.jsonl"), key=os.path.getmtime)[-1]
    c = collections.Counter()
    for line in open(path):
        s = json.loads(line)
        if s["event"] != "step":
            continue
        post = ((s.get("extra") or {}).get("policy") or {}).get("posterior") or {}
        acts = post.get("actions", {})
        lost = set(post.get("punished", []))
        puts = [a for a in acts if a.startswith("put ") and " in " in a]
        targets = {a.rsplit(" in ", 1)[1] for a in puts}
        closed = [a for a in acts if a.startswith("open ") and a[5:] not in targets]
        for o in {a[4:].rsplit(" in ", 1)[0] for a in puts}:
            g = [a for a in puts if a.startswith(f"put {o} in ")]
            if len(g) < 2 or not closed:
                continue
            e = {a: ev(acts[a]) for a in g}
            old = any(n for k, n in e.values()) and not any(k for k, n in e.values())
            if old and lost & set(g):
                c["old holds, some lost", bool(post.get("explored"))] += 1
    print(home, dict(c))
