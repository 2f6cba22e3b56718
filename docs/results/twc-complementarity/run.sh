#!/bin/bash
# Every arm of PLAN.md, two at a time: WT=<checkout at 94d65cd> ./run.sh (from a scratch folder).
# S = the round-2 snapshot of twc skills+sft repeat 2 (stop 57's folder E).
S=${S:-/work/runs/twc2/E/skills-sft/repeat-2}; AD=$S/adapters/sft-20261207-060140-9f66/adapter
E=$(dirname "$0")/eval.sh
alone() { CRL_MEMORY__ENABLED=false "$E" "$@" --memory off; }
# dev, seeds 10000-10095
"$E" bm $S & "$E" am $S --adapter $AD & wait
alone ao $S --adapter $AD & alone bo $S & wait
# test, seeds 20096-20191 (the confirmation)
export FOLD=test SEED=96
"$E" am-test $S --adapter $AD & "$E" bm-test $S & wait
alone ao-test $S --adapter $AD & alone bo-test $S & wait
