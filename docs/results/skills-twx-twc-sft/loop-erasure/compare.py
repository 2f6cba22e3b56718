"""Pair the loop-erased-credit evaluation with the run's own two (plain credit, adapter alone) by dev seed.

Usage: python docs/results/skills-twx-twc-sft/loop-erasure/compare.py [per_seed.json]
(per_seed.json: each dev seed's success and score points under the three settings.)
"""

import json
import sys
from pathlib import Path

from crl.tasks.evaluation import discordant, mcnemar_p, wilson_interval

path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).with_name("per_seed.json")
rows = json.loads(path.read_text())
seeds = sorted(rows)
won = {arm: [rows[s][arm]["success"] for s in seeds] for arm in ("loop-erased", "plain", "alone")}
third = {arm: sum(rows[s][arm]["points"] >= 3 for s in seeds) for arm in won}
for arm, outcomes in won.items():
    lo, hi = wilson_interval(sum(outcomes), len(seeds))
    print(f"{arm}: {sum(outcomes)}/{len(seeds)} won ({lo:.0%}-{hi:.0%}); third point reached in {third[arm]}")
for other in ("plain", "alone"):
    a, b = discordant(won["loop-erased"], won[other])
    print(
        f"loop-erased against {other}: {a}:{b} on {len(seeds)} paired seeds, p = {mcnemar_p(won['loop-erased'], won[other]):.3g}"
    )
