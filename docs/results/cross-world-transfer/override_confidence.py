"""Override steps of an adapter+memory eval, split by the model's confidence, against the adapter alone.

Usage: python override_confidence.py MEMORY_EVAL/episodes.jsonl ADAPTER_ALONE_EVAL/episodes.jsonl
"""

import collections
import json
import sys

BINS = ("p>=0.9", "0.7-0.9", "0.5-0.7", "<0.5")


def load(path: str) -> tuple[dict[int, bool], dict[int, list[dict]]]:
    """Per seed: whether the episode was won, and its steps."""
    rows = [json.loads(line) for line in open(path)]
    seeds = {r["episode_id"]: r["seed"] for r in rows if r["event"] == "start"}
    won = {seeds[r["episode_id"]]: bool(r.get("success")) for r in rows if r["event"] == "end"}
    steps: dict[int, list[dict]] = collections.defaultdict(list)
    for r in rows:
        if r["event"] == "step":
            steps[seeds[r["episode_id"]]].append(r)
    return won, steps


def confidence_bin(p: float) -> str:
    return BINS[0] if p >= 0.9 else BINS[1] if p >= 0.7 else BINS[2] if p >= 0.5 else BINS[3]


def main(memory_eval: str, alone_eval: str) -> None:
    mw, ms = load(memory_eval)
    aw, _ = load(alone_eval)
    print("M", sum(mw.values()), "A", sum(aw.values()), "M only", sum(mw[s] and not aw[s] for s in mw), end=" ")
    print("A only", sum(aw[s] and not mw[s] for s in mw))
    every = collections.defaultdict(collections.Counter)
    first = collections.defaultdict(collections.Counter)
    for seed, steps in ms.items():
        seen = False
        for r in steps:
            p = (r.get("extra") or {}).get("policy", {}).get("posterior")
            if not p or not p.get("memory_changed_argmax"):
                continue
            b = confidence_bin(p["actions"][p["model_best"]]["model"])
            key = ("M" if mw[seed] else "m") + ("A" if aw[seed] else "a")
            every[b][key] += 1
            if not seen:
                first[b][key] += 1
                seen = True
    print("override steps by model top prob; key: M/m = memory arm won/lost, A/a = adapter alone won/lost")
    for b in BINS:
        print(b, dict(every[b]), "first override:", dict(first[b]))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
