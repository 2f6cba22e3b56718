"""Loop-erased against plain credit on keyroom/key and twx/coin: each setting's `crl experiment curve`
results (the same seeds, train and dev, for both), paired on (repeat, dev seed) at each point.

Usage: python docs/results/loop-erasure-default/pair.py
"""

import json
from pathlib import Path

from crl.tasks.evaluation import discordant, mcnemar_p, wilson_interval

HERE = Path(__file__).parent


def outcomes(name: str) -> dict[int, dict[tuple[int, str], bool]]:
    """Training episodes at the point -> (repeat, dev seed) -> won."""
    points: dict[int, dict[tuple[int, str], bool]] = {}
    for run in json.loads((HERE / f"{name}.json").read_text())["runs"]:
        for point in run["points"]:
            points.setdefault(point["train_episodes"], {}).update(
                {(run["repeat"], seed): won for seed, won in point["outcomes"].items()}
            )
    return points


def rate(won: list[bool]) -> str:
    lo, hi = wilson_interval(sum(won), len(won))
    return f"{sum(won)}/{len(won)} ({lo:.0%}-{hi:.0%})"


print("| task | training episodes | loop-erased | plain | loop-erased only : plain only | McNemar p |")
print("|---|---|---|---|---|---|")
for task, name in (("keyroom/key", "key"), ("twx/coin", "coin")):
    erased, plain = outcomes(f"{name}-true"), outcomes(f"{name}-false")
    for point in sorted(erased):
        keys = sorted(set(erased[point]) & set(plain[point]))
        a, b = [erased[point][k] for k in keys], [plain[point][k] for k in keys]
        only_a, only_b = discordant(a, b)
        print(f"| {task} | {point} | {rate(a)} | {rate(b)} | {only_a}:{only_b} | {mcnemar_p(a, b):.3g} |")
