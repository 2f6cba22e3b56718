#!/bin/bash
# $1 = name, $2 = greedy|sample: adapter + memory collects 32 twc train episodes (train seeds from offset
# 900) on a copy of the r0 round-2 snapshot; then opened.py counts puts into opened places.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_THREADS=1 CRL_LLM__DTYPE=bf16
export CRL_AGENT__POSTERIOR__MODE=$2
A0=/work/runs/twc3/A/skills-sft/repeat-0; AD0=$A0/adapters/sft-20261206-101913-7a11/adapter
cd "${DIR:-.}"; rm -rf home-$1; cp -a $A0 home-$1
${WT:-/work/runs/wt36}/.venv/bin/crl --home home-$1 run 'twx/twc?numLocations=1&numItemsToPutAway=2' -n 32 -k 8 --seed 900 \
  --policy posterior --max-steps 10 --adapter $AD0 --json > $1.json 2> $1.log
echo "$(date +%T) end $1 $(grep -o '"successes": [0-9]*' $1.json)" >> done.log
