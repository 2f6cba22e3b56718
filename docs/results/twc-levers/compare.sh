#!/bin/bash
# Paired comparisons for the twc levers of stop 49, each pooled over the two round-1 snapshots (r0, r1).
source /work/main/.venv/bin/activate
export HF_HUB_OFFLINE=1 COLUMNS=200
C=/work/runs/c14; H=/work/runs/held; R=/work/runs/roles; S=/work/runs/soft
ev() { echo $1/evals/$(ls $1/evals | sort | tail -1); }
pool() { local d=$1 arm=$2; shift 2; local out=(); for rf in "$@"; do out+=($(ev $d/home-$rf-$arm)); done; (IFS=,; echo "${out[*]}"); }
FOLDS="r0-test r1-test r0-dev r1-dev"
mkdir -p out
echo "== base + memory (loop-erased credit): before, held-reward rule, held + twc roles; 4 x 32 seeds"
crl compare "before=$(pool $C base-mem-le $FOLDS)" "held=$(pool $H base-mem-le $FOLDS)" "held+roles=$(pool $R base-mem-le $FOLDS)" --all-pairs ${JSON:+--json} | tee out/base-mem${JSON:+.json}
echo "== soft-target adapters (equal compute) against the hard ones and base + memory; test folds, 2 x 32 seeds"
crl compare "soft alone=$(pool $S soft-alone r0-test r1-test)" "hard alone=$(pool $C adapter-alone r0-test r1-test)" \
  "soft+memory=$(pool $S soft-mem r0-test r1-test)" "hard+memory=$(pool $C adapter-mem-plain r0-test r1-test)" \
  "base+memory=$(pool $C base-mem-le r0-test r1-test)" --all-pairs ${JSON:+--json} | tee out/soft${JSON:+.json}
