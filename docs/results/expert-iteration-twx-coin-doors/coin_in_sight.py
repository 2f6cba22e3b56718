"""Lost games of each run, split by whether the coin was ever in sight.

usage: python coin_in_sight.py RUN_DIR...   (each with the episodes.jsonl `crl eval` writes)
"""

import sys
from pathlib import Path

from crl.agent.runs import RunStore

for run in map(Path, sys.argv[1:]):
    lost = [e for e in RunStore(run.resolve().parent).episodes(run.name) if not e.success]
    seen = {e.seed for e in lost if any("coin" in s.observation.rsplit("\n\n", 1)[-1] for s in e.steps)}
    print(run)
    print("  lost with the coin in sight:", sorted(seen))
    print("  lost without:", sorted(e.seed for e in lost if e.seed not in seen))
