#!/bin/bash
# $1 = name, $2 = home to copy, $3 = task; base + memory under the posterior, 32 dev seeds; ANALOGY=true|false
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_THREADS=1 CRL_LLM__DTYPE=bf16
export CRL_RETRIEVAL__EC_ANALOGY=$ANALOGY
cd /work/runs/ank; rm -rf home-$1; cp -a $2 home-$1
/work/runs/wt35/.venv/bin/crl --home home-$1 eval "$3" --fold dev -n 32 -k 8 --policy posterior --json > $1.json.tmp 2> $1.log && mv $1.json.tmp $1.json
echo "$(date +%T) end $1 $(grep -o '"successes": [0-9]*' $1.json 2>/dev/null)" >> done.log
