#!/bin/bash
# $1 = name, $2 = snapshot; base model + that snapshot's memory, dev, the experiment's seeds and settings
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_THREADS=1 CRL_LLM__DTYPE=bf16
TASK='twx/twc?numLocations=1&numItemsToPutAway=2'
cd /work/runs/r2; rm -rf home-$1; cp -a $2 home-$1
/work/runs/wt28/.venv/bin/crl --home home-$1 eval "$TASK" --fold dev -n 32 -k 8 --policy posterior --max-steps 10 --json > $1.json.tmp 2> $1.log && mv $1.json.tmp $1.json
echo "$(date +%T) end $1 $(grep -o '"successes": [0-9]*' $1.json 2>/dev/null)" >> done.log
