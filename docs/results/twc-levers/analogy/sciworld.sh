#!/bin/bash
# $1 = name; ANALOGY=true|false. Base model under the posterior on sciworld: 8 train episodes fill a
# fresh bank, then 8 dev episodes read it (the same seeds both ways).
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_THREADS=${CRL_THREADS:-1} CRL_LLM__DTYPE=bf16
export CRL_RETRIEVAL__EC_ANALOGY=$ANALOGY
T=${T:-sciworld/lifespan-longest-lived}
cd "${DIR:-.}"; rm -rf home-$1
C=${WT:-/work/runs/wt36}/.venv/bin/crl
$C --home home-$1 run "$T" -n 8 -k 4 --policy posterior --max-steps ${STEPS:-10} --json > $1-train.json 2> $1-train.log
$C --home home-$1 eval "$T" --fold dev -n 8 -k 4 --policy posterior --max-steps ${STEPS:-10} --json > $1.json 2> $1.log
echo "$(date +%T) end $1 $(grep -o '"successes": [0-9]*' $1.json) $(grep -o '"mean_score": [0-9.]*' $1.json)" >> done.log
