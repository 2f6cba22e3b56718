"""Lost games of each run, split by whether the coin was ever in sight.

usage: python coin_in_sight.py RUN_DIR...   (each with the episodes.jsonl `crl eval` writes)
"""

import json
import sys
from collections import defaultdict
from pathlib import Path

for run in sys.argv[1:]:
    seeds, won, seen = {}, {}, defaultdict(bool)
    for line in open(Path(run) / "episodes.jsonl"):
        event = json.loads(line)
        episode = event["episode_id"]
        if event["event"] == "start":
            seeds[episode] = event["seed"]
        elif event["event"] == "step":
            seen[episode] |= "coin" in event["observation"].rsplit("\n\n", 1)[-1]
        elif event["event"] == "end":
            won[episode] = bool(event.get("success"))
    lost = [e for e in seeds if not won.get(e)]
    print(run)
    print("  lost with the coin in sight:", sorted(seeds[e] for e in lost if seen[e]))
    print("  lost without:", sorted(seeds[e] for e in lost if not seen[e]))
