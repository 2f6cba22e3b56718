#!/bin/bash
source /work/runs/wt20/.venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_THREADS=1 CRL_LLM__DTYPE=bf16 CRL_RETRIEVAL__EC_LOOP_ERASURE=true
cd /work/runs/le
crl --home homeA eval 'twx/twc?numLocations=1&numItemsToPutAway=2' --fold dev -n 32 -k 8 --policy posterior \
  --adapter sft-20261206-014628-d56b --max-steps 10 --json > evalA.json 2> evalA.log
echo EXIT $? >> evalA.log
