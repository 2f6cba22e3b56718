"""After a punished put is passed over: how often the put chosen instead earns (by run), and puts in general."""

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
        if e["event"] != "step" or not e["action"].startswith("put"):
            continue
        post = ((e.get("extra") or {}).get("policy") or {}).get("posterior") or {}
        k = "after a punished pass" if post.get("posterior_best") in post.get("punished", []) else "other puts"
        c[k, e["reward"] > 0] += 1
    for k in ("after a punished pass", "other puts"):
        n = c[k, True] + c[k, False]
        print(f"{h:40s} {k:22s} {c[k, True]}/{n} earn")
