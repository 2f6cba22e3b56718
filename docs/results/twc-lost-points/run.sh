#!/bin/bash
# Every arm of PLAN.md, two at a time: WT=<checkout> ./run.sh (from a scratch folder). WT at 5669fa6 for
# the two rules, at 7d310f1 for the held-reward fix. S = stop 57's twc skills+sft repeat-2 snapshot.
S=${S:-/work/runs/twc2/E/skills-sft/repeat-2}; AD=$S/adapters/sft-20261207-060140-9f66/adapter
E=$(dirname "$0")/../twc-complementarity/eval.sh
alone() { CRL_MEMORY__ENABLED=false "$E" "$@" --memory off; }
"$E" bm $S & "$E" am $S --adapter $AD & wait                                   # dev 10000-10095
FOLD=test SEED=96 "$E" bm-test $S & FOLD=test SEED=96 "$E" am-test $S --adapter $AD & wait   # test 20096-20191
alone ao $S --adapter $AD & FOLD=test SEED=96 alone ao-test $S --adapter $AD & wait
# pairs: crl compare "BM=home-bm/evals/<run>" "BM0=<stop 59's home-bm/evals/<run>>" ... --all-pairs --games --json
