#!/bin/bash
# coin with doors: the model alone, then 48 train games stored and base + memory on the same 96 dev seeds
source ${WT:-.}/.venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_LLM__DTYPE=bf16 CRL_THREADS=1
export CRL_HOME=${OUT:-runs}/doors
COIN="twx/coin?numLocations=5&numDistractorItems=0&includeDoors=1"
CRL_MEMORY__ENABLED=false crl eval "$COIN" --fold dev -n 96 -k 8 --max-steps 10 --memory off --json > doors.json
crl run "$COIN" -n 48 -k 8 --max-steps 10 --json > doors-collect.json
crl eval "$COIN" --fold dev -n 96 -k 8 --max-steps 10 --json > doors-mem.json
