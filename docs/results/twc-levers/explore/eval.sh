#!/bin/bash
# Directed exploration on twc: adapter + memory and base + memory on the round-2 snapshots r0 and r1,
# 32 seeds of FOLD (dev by default) each, one at a time, one thread; each evaluation plays on its own
# copy of the snapshot (memory frozen). WT = a worktree of the commit to measure, with its venv.
#   FOLD=dev ./eval.sh; FOLD=test SUF=-test ./eval.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_THREADS=1 CRL_LLM__DTYPE=bf16
export CRL_AGENT__POSTERIOR__EXPLORE_ENABLING=${EXPLORE:-true}
TASK='twx/twc?numLocations=1&numItemsToPutAway=2'
A0=/work/runs/twc3/A/skills-sft/repeat-0; A1=/work/runs/twc3/C/skills-sft/repeat-1
AD0=$A0/adapters/sft-20261206-101913-7a11/adapter; AD1=$A1/adapters/sft-20261206-101803-b91b/adapter
play() {  # name, snapshot, extra args
  local name=$1 src=$2; shift 2
  rm -rf home-$name; cp -a $src home-$name
  $WT/.venv/bin/crl --home home-$name eval "$TASK" --fold ${FOLD:-dev} -n 32 -k 8 --policy posterior \
    --max-steps 10 "$@" --json > $name.json
}
play r0-am-x$SUF $A0 --adapter $AD0
play r1-am-x$SUF $A1 --adapter $AD1
play r0-bm-x$SUF $A0
play r1-bm-x$SUF $A1
