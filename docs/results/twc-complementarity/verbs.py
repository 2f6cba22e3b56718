"""Per run: steps per game by verb, games whose first step opens something, and the closes of places
the game itself opened, by who decided them.

    python verbs.py HOME/evals/RUN_ID/episodes.jsonl...
"""

import collections
import json
import sys

for path in sys.argv[1:]:
    verbs: collections.Counter = collections.Counter()
    closes_by: collections.Counter = collections.Counter()
    episodes = collections.defaultdict(list)
    for line in open(path):
        event = json.loads(line)
        if event["event"] == "step":
            episodes[event["episode_id"]].append(event)
    open_first = 0
    for steps in episodes.values():
        opened = set()
        open_first += bool(steps) and steps[0]["action"].startswith("open ")
        for step in steps:
            verb, _, thing = step["action"].partition(" ")
            verbs[verb] += 1
            if verb == "open":
                opened.add(thing)
            if verb == "close":
                closes_by[(thing in opened, step["decided_by"])] += 1
    games = len(episodes)
    per_game = ", ".join(f"{v} {n / games:.2f}" for v, n in verbs.most_common())
    closes = {f"{'opened here' if mine else 'not opened here'}, {by}": n for (mine, by), n in closes_by.items()}
    print(f"{path}: {games} games; steps per game: {per_game}; first step opens in {open_first}; closes: {closes}")
