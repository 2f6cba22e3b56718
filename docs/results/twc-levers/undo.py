"""Count repeats of a rewarded action whose reward the episode still held, in evaluation logs.

Usage: python undo.py HOME [HOME...]   (reads each home's newest evals/*/episodes.jsonl)
"""

import glob
import json
import sys
from collections import Counter


def scan(path: str) -> Counter:
    episodes: dict[str, list[dict]] = {}
    for line in open(path):
        event = json.loads(line)
        episodes.setdefault(event["episode_id"], []).append(event)
    counts = Counter()
    for events in episodes.values():
        steps = [e for e in events if e["event"] == "step"]
        end = [e for e in events if e["event"] == "end"]
        if not end:
            continue
        counts["episodes"] += 1
        counts["won"] += bool(end[0].get("success"))
        earned: dict[str, float] = {}
        total = 0.0
        for step in steps:
            action, reward = step.get("action"), step.get("reward") or 0
            if action in earned and total + 1e-9 >= earned[action]:
                counts["held-repeats"] += 1
                counts["held-repeats-lost"] += reward < 0
            counts["lost-steps"] += reward < 0
            total += reward
            if reward > 0:
                earned[action] = total
    return counts


for home in sys.argv[1:]:
    newest = max(glob.glob(home + "/evals/*/episodes.jsonl"), key=lambda p: p.split("/")[-2])
    print(home.rstrip("/").split("/")[-1], dict(scan(newest)))
