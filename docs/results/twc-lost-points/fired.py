"""How often the stop-60 rules changed a decision: per run, decisions where a punished action or an undo was
passed over (and would have been the pick without it), and the steps spent on closes and lost points."""

import collections
import glob
import json
import os
import sys

for h in sys.argv[1:]:
    r = sorted(glob.glob(f"{h}/evals/*/"), key=os.path.getmtime)[-1]
    c = collections.Counter()
    for line in open(r + "episodes.jsonl"):
        e = json.loads(line)
        if e["event"] == "end":
            c["episodes"] += 1
            c["won"] += bool(e.get("success"))
        if e["event"] != "step":
            continue
        post = ((e.get("extra") or {}).get("policy") or {}).get("posterior") or {}
        best = post.get("posterior_best")
        if best and best in post.get("punished", []):
            c["punished argmax passed over"] += 1
        if best and best in post.get("undoes", []):
            c["undo argmax passed over"] += 1
        if post.get("punished"):
            c["decisions with a punished action listed"] += 1
        c["steps"] += 1
        c["close steps"] += e["action"].startswith("close")
        c["steps losing points"] += e["reward"] < 0
    print(h, dict(c))
