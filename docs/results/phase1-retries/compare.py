"""Pair `phase1_point.py` lines by (repeat, dev seed): retries against none.

Usage: python compare.py results.jsonl [--baseline RESULTS_JSON]
(`--baseline`: a `crl experiment skills` results.json; its `skills` arm's first points are listed too,
and stand in for `--retries 0` in the pairing on repeats the file has no such line for.)
"""

import argparse
import json

from crl.tasks.evaluation import discordant, mcnemar_p, wilson_interval


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("lines")
    parser.add_argument("--baseline")
    args = parser.parse_args()
    rows = [json.loads(line) for line in open(args.lines)]
    by = {(r["repeat"], r["retries"]): r for r in rows}
    listed = list(rows)
    if args.baseline:
        for run in json.load(open(args.baseline))["runs"]:
            if run["arm"] == "skills" and run["points"]:
                first = run["points"][0]
                line = {
                    "repeat": run["repeat"], "retries": 0, "dev": first["outcomes"],
                    "env_steps": first["env_steps"], "source": "baseline",
                    "segments_by_skill": first["detail"]["synthesis"]["segments_by_skill"],
                    "stitches_validated": first["detail"]["synthesis"]["stitches_validated"],
                }  # fmt: skip
                listed.append(line)
                by.setdefault((run["repeat"], 0), line)
    print("| repeat | retries | env steps | segments (key/door/chest) | stitches validated | dev |")
    print("|---|---|---|---|---|---|")
    for r in sorted(listed, key=lambda r: (r["repeat"], r["retries"], not r.get("source"))):
        rep, retries = r["repeat"], r["retries"]
        seg = r["segments_by_skill"]
        won = sum(r["dev"].values())
        source = " (from the run)" if r.get("source") else ""
        print(
            f"| {rep} | {retries}{source} | {r['env_steps']} | {seg.get('key', 0)}/{seg.get('door', 0)}/"
            f"{seg.get('chest', 0)} | {r['stitches_validated']} | {won}/{len(r['dev'])} |"
        )
    with_r, without = [], []
    for (rep, retries), r in sorted(by.items()):
        if retries and (rep, 0) in by:
            base = by[(rep, 0)]["dev"]
            for seed in sorted(set(r["dev"]) & set(base)):
                with_r.append(r["dev"][seed])
                without.append(base[seed])
    if with_r:
        a, b = discordant(with_r, without)
        for name, xs in (("retries", with_r), ("none", without)):
            lo, hi = wilson_interval(sum(xs), len(xs))
            print(f"{name}: {sum(xs)}/{len(xs)} ({lo:.0%}-{hi:.0%})")
        print(
            f"paired dev seeds: {len(with_r)}; retries only {a}, none only {b}; McNemar p = {mcnemar_p(with_r, without):.3g}"
        )


if __name__ == "__main__":
    main()
