#!/bin/bash
# usage: OUT=DIR run.sh WT
#   WT: a checkout with its own .venv (the commit to measure).
# coin with doors (5 rooms, no distractors, 10 steps): the model alone on 96 dev seeds; 48 train games
# stored, then base + memory on the same 96 dev seeds (memory frozen); twc (one room, two items) alone
# on 32 dev seeds. The same games as ../twx-coin-ways-out/doors.sh and eval.sh.
set -u
WT=$1; OUT=${OUT:-runs}
mkdir -p "$OUT"
COIN="twx/coin?numLocations=5&numDistractorItems=0&includeDoors=1"
TWC="twx/twc?numLocations=1&numItemsToPutAway=2"
source "$WT/.venv/bin/activate"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_LLM__DTYPE=bf16 CRL_THREADS=1
export CRL_HOME=$OUT/doors
CRL_MEMORY__ENABLED=false crl eval "$COIN" --fold dev -n 96 -k 8 --max-steps 10 --memory off --json > "$OUT/doors-alone.json"
crl run "$COIN" -n 48 -k 8 --max-steps 10 --json > "$OUT/doors-collect.json"
crl eval "$COIN" --fold dev -n 96 -k 8 --max-steps 10 --json > "$OUT/doors-memory.json"
CRL_HOME=$OUT/twc CRL_MEMORY__ENABLED=false crl eval "$TWC" --fold dev -n 32 -k 8 --max-steps 10 --memory off --json > "$OUT/twc-alone.json"
# The test fold, played once after every dev figure was known (d705bdd):
# CRL_HOME=$OUT/doors-test CRL_MEMORY__ENABLED=false crl eval "$COIN" --fold test -n 96 -k 8 --max-steps 10 --memory off --json > "$OUT/doors-test.json"
