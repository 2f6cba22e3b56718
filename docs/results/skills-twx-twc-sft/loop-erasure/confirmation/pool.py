"""Pool the `crl compare --json` files of both repeats: each arm's wins, and paired McNemar tests on
(repeat, seed) pairs, on the dev fold, the test fold, and the confirmation set (every evaluation
except repeat 0's dev seeds, on which loop-erased credit was chosen).

Usage: python docs/results/skills-twx-twc-sft/loop-erasure/confirmation/pool.py
"""

import json
from pathlib import Path

from crl.tasks.evaluation import discordant, mcnemar_p, wilson_interval

HERE = Path(__file__).parent
SETS = {
    "dev (2 x 32)": ["r0-dev", "r1-dev"],
    "test (2 x 32)": ["r0-test", "r1-test"],
    "confirmation (96: repeat 1 dev, both tests)": ["r1-dev", "r0-test", "r1-test"],
}
PAIRS = [
    ("adapter+memory, loop-erased", "adapter+memory, plain"),
    ("adapter+memory, loop-erased", "adapter alone"),
    ("adapter+memory, loop-erased", "base+memory, loop-erased"),
    ("adapter+memory, plain", "adapter alone"),
    ("adapter+memory, plain", "(c) base+memory before SFT, plain"),
    ("base+memory, loop-erased", "(c) base+memory before SFT, plain"),
]


def outcomes(files: list[str]) -> dict[str, dict[tuple[str, str], bool]]:
    """Arm label -> (file, seed) -> won."""
    arms: dict[str, dict[tuple[str, str], bool]] = {}
    for name in files:
        for run in json.loads((HERE / f"{name}.json").read_text())["runs"]:
            for seed, won in run["outcomes"].items():
                arms.setdefault(run["label"], {})[(name, seed)] = won
    return arms


for title, files in SETS.items():
    arms = outcomes(files)
    print(f"\n{title}")
    for label, won in arms.items():
        lo, hi = wilson_interval(sum(won.values()), len(won))
        print(f"  {label}: {sum(won.values())}/{len(won)} ({lo:.0%}-{hi:.0%})")
    for a, b in PAIRS:
        keys = sorted(set(arms[a]) & set(arms[b]))
        xa, xb = [arms[a][k] for k in keys], [arms[b][k] for k in keys]
        only_a, only_b = discordant(xa, xb)
        print(f"  {a} vs {b}: {only_a}:{only_b}, p = {mcnemar_p(xa, xb):.3g} ({len(keys)} pairs)")
