#!/bin/bash
# $1 = folder, $2 = extra flags (repeat selection)
source /work/runs/wt28/.venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_THREADS=1 CRL_LLM__DTYPE=bf16
cd /work/runs/twc3
crl experiment skills 'twx/twc?numLocations=1&numItemsToPutAway=2' --arms ${ARMS:-skills,skills+sft} --phase1 8 --attempts 4 --budget 16 \
  --eval-episodes 32 --test-episodes 32 $2 -k 8 --drrn-steps 20000 --drrn-eval-every 4000 --max-steps 10 \
  --align 16 --sft-rounds 2 --collect 64 --continue-rounds --round-steps 24 --out $1 --json > $1.json.out 2> $1.log
echo EXIT $? >> $1.log
