"""One arm of the keyroom places measurement: `task` on `n` dev seeds, the embedded model scoring
under the posterior, alone or with the bank in HOME, with or without an adapter; the bench's row
(per-seed outcomes included) is written to OUT.

usage: python arm.py HOME TASK N OUT [--memory] [--adapter FOLDER]
"""

import argparse
import json
from pathlib import Path

from bench.finetune_bench import _eval

parser = argparse.ArgumentParser()
parser.add_argument("home", type=Path)
parser.add_argument("task")
parser.add_argument("n", type=int)
parser.add_argument("out", type=Path)
parser.add_argument("--memory", action="store_true")
parser.add_argument("--adapter", type=Path)
args = parser.parse_args()
row = _eval(args.home, args.task, args.n, args.adapter, args.memory, Path(".crl/models"), policy="posterior")
row |= {"task": args.task, "memory": args.memory, "adapter": str(args.adapter) if args.adapter else None}
args.out.parent.mkdir(parents=True, exist_ok=True)
args.out.write_text(json.dumps(row, indent=1))
print(args.out, row["successes"], "/", row["episodes"])
