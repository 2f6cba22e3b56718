#!/bin/bash
# #15 twc arm (c) repeat 0 again with the held-reward rule and the stitch object check , twc action roles (ee20ee7), same ARGS as stop 47's A.
source /work/runs/wt25/.venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_THREADS=1 CRL_LLM__DTYPE=bf16
cd /work/runs/twc2
crl experiment skills 'twx/twc?numLocations=1&numItemsToPutAway=2' --arms skills --phase1 8 --attempts 4 --budget 16 \
  --eval-episodes 32 --test-episodes 32 --repeats 2 -k 8 --drrn-steps 20000 --drrn-eval-every 4000 --max-steps 10 \
  --align 16 --sft-rounds 2 --collect 64 --continue-rounds --round-steps 24 --out D --json > D.json.out 2> D.log
echo "EXIT $? $(date +%T)" >> D.log
