#!/bin/bash
# usage: OUT=DIR run.sh WT   (WT: a checkout with its own .venv; the commit measured was df26429)
# follow-through: coin with doors, the model alone, the 96 dev seeds of ../twx-coin-undos;
# then base + memory (48 train games stored under the same rules); twc alone (32 dev seeds)
set -u
WT=$1; OUT=${OUT:-runs}
COIN="twx/coin?numLocations=5&numDistractorItems=0&includeDoors=1"
TWC="twx/twc?numLocations=1&numItemsToPutAway=2"
source "$WT/.venv/bin/activate"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_LLM__DTYPE=bf16 CRL_THREADS=1
export CRL_HOME=$OUT/doors
mkdir -p "$OUT"
CRL_MEMORY__ENABLED=false crl eval "$COIN" --fold dev -n 96 -k 8 --max-steps 10 --memory off --json > "$OUT/doors-alone.json"
crl run "$COIN" -n 48 -k 8 --max-steps 10 --json > "$OUT/doors-collect.json"
crl eval "$COIN" --fold dev -n 96 -k 8 --max-steps 10 --json > "$OUT/doors-memory.json"
CRL_HOME=$OUT/twc CRL_MEMORY__ENABLED=false crl eval "$TWC" --fold dev -n 32 -k 8 --max-steps 10 --memory off --json > "$OUT/twc-alone.json"
