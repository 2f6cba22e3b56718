#!/bin/bash
# The model alone on twc r0 dev with the held-reward rule switched off (e55a950), to pair with held/r0-dev-none (rule on).
source /work/main/.venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_THREADS=1 CRL_LLM__DTYPE=bf16
cd /work/runs/ab
CRL_MEMORY__ENABLED=false CRL_AGENT__HELD_REWARDS=false crl --home home-off eval 'twx/twc?numLocations=1&numItemsToPutAway=2' --fold dev -n 32 -k 8 \
  --policy posterior --max-steps 10 --memory off --json > r0-dev-none-off.json 2> r0-dev-none-off.log
echo "done $(date +%T)" >> r0-dev-none-off.log
