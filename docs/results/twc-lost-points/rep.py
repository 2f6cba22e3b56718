"""Per run folder (a crl home): steps that lost points, and how many repeated an action that had already lost points in the same episode (who decided them)."""

import collections
import glob
import json
import os
import sys

for h in sys.argv[1:]:
    r = sorted(glob.glob(f"{h}/evals/*/"), key=os.path.getmtime)[-1]
    steps = collections.defaultdict(list)
    end = {}
    for line in open(r + "episodes.jsonl"):
        e = json.loads(line)
        if e["event"] == "step":
            steps[e["episode_id"]].append(e)
        if e["event"] == "end":
            end[e["episode_id"]] = e
    rep = 0
    repeps = set()
    neg = 0
    by = collections.Counter()
    lostrep = 0
    for eid, ss in steps.items():
        bad = set()
        for s in ss:
            if s["action"] in bad:
                rep += 1
                repeps.add(eid)
                by[s["decided_by"]] += 1
            if s["reward"] < 0:
                bad.add(s["action"])
                neg += 1
    lost = [e for e in end if not end[e].get("success")]
    print(
        h,
        "neg steps",
        neg,
        "repeats of a negative action",
        rep,
        "in",
        len(repeps),
        "episodes;",
        sum(1 for e in repeps if not end[e].get("success")),
        "of them lost; by",
        dict(by),
    )
