"""Where each twc object belongs, read off every rewarded put in the episode logs under ROOT.

python locmap.py ROOT > locmap.json
"""

import glob
import json
import sys

places: dict[str, set[str]] = {}
for path in glob.glob(f"{sys.argv[1]}/**/episodes.jsonl", recursive=True):
    for line in open(path):
        if '"put ' not in line or '"event": "step"' not in line:
            continue
        step = json.loads(line)
        action = step["action"]
        if action.startswith("put ") and " in " in action and step["reward"] > 0:
            obj, place = action[4:].rsplit(" in ", 1)
            places.setdefault(obj, set()).add(place)
json.dump({k: sorted(v) for k, v in sorted(places.items())}, sys.stdout, indent=0)
