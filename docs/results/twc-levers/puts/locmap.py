"""Where each twc object belongs, read off every rewarded put in the episode logs under ROOT.

    python locmap.py ROOT > locmap.json

`load` and `puts` read that map and an evaluation's puts for `putrate.py` and `deciders.py`.
"""

import glob
import json
import sys
from collections.abc import Iterator


def load(path: str) -> dict[str, set[str]]:
    """The object -> right places map this script wrote."""
    return {k: set(v) for k, v in json.load(open(path)).items()}


def puts(path: str, right: dict[str, set[str]]) -> Iterator[tuple[dict, str, str, bool]]:
    """(step, object, place, whether the place is right) for each put of an object in `right`."""
    for line in open(path):
        step = json.loads(line)
        action = step.get("action", "")
        if step.get("event") != "step" or not action.startswith("put ") or " in " not in action:
            continue
        obj, place = action[4:].rsplit(" in ", 1)
        if obj in right:
            yield step, obj, place, step["reward"] > 0 or place in right[obj]


def main(root: str) -> None:
    """Print, as JSON, the places each object's rewarded puts went to in the logs under `root`."""
    places: dict[str, set[str]] = {}
    for path in glob.glob(f"{root}/**/episodes.jsonl", recursive=True):
        for line in open(path):
            if '"put ' not in line or '"event": "step"' not in line:
                continue
            step = json.loads(line)
            action = step["action"]
            if action.startswith("put ") and " in " in action and step["reward"] > 0:
                obj, place = action[4:].rsplit(" in ", 1)
                places.setdefault(obj, set()).add(place)
    json.dump({k: sorted(v) for k, v in sorted(places.items())}, sys.stdout, indent=0)


if __name__ == "__main__":
    main(sys.argv[1])
