#!/bin/bash
# Fresh test seeds 20288-20383 (never played), PLAN.md in docs/results/twc-explore-refuted/.
# New code: wtv (the rule); old code: wtw at 4908575. Each arm on its own copy of the snapshot (frozen).
S=/work/runs/twc2/E/skills-sft/repeat-2; AD=$S/adapters/sft-20261207-060140-9f66/adapter
AD1=$S/adapters/sft-20261207-004404-ee5f/adapter
E=/work/main/docs/results/twc-complementarity/eval.sh
export FOLD=test SEED=288
cd /work/runs/twce
WT=/work/runs/wtv "$E" am-f $S --adapter $AD & WT=/work/runs/wtv "$E" bm-f $S & wait
WT=/work/runs/wtw "$E" am0-f $S --adapter $AD & WT=/work/runs/wtw "$E" bm0-f $S & wait
alone() { CRL_MEMORY__ENABLED=false "$E" "$@" --memory off; }
WT=/work/runs/wtv alone ao-f $S --adapter $AD & WT=/work/runs/wtv "$E" am1-f $S --adapter $AD1 & wait
WT=/work/runs/wtv alone ao1-f $S --adapter $AD1
echo done-fresh $(date)
