#!/bin/bash
# usage: OUT=DIR eval.sh WT LABEL
#   WT: a checkout with its own .venv (the commit to measure); LABEL: names the homes and results in OUT.
# The same games as ../twx-coin-frontier/eval.sh: twx/coin (5 rooms, no distractors, 10 steps), the
# model alone (scoring) on 96 dev seeds; twx/twc (one room, two items) alone on 32 dev seeds; coin
# alone on 96 test seeds; then 48 train games with memory and base + memory on the 96 dev seeds
# (memory frozen: evaluations do not store).
set -u
WT=$1; L=$2; OUT=${OUT:-runs}
mkdir -p "$OUT"
COIN="twx/coin?numLocations=5&numDistractorItems=0&includeDoors=0"
TWC="twx/twc?numLocations=1&numItemsToPutAway=2"
source "$WT/.venv/bin/activate"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_LLM__DTYPE=bf16 CRL_THREADS=1
export CRL_HOME=$OUT/coin-$L
CRL_MEMORY__ENABLED=false crl eval "$COIN" --fold dev -n 96 -k 8 --max-steps 10 --memory off --json > "$OUT/$L-coin-alone.json"
CRL_HOME=$OUT/twc-$L CRL_MEMORY__ENABLED=false crl eval "$TWC" --fold dev -n 32 -k 8 --max-steps 10 --memory off --json > "$OUT/$L-twc.json"
CRL_MEMORY__ENABLED=false crl eval "$COIN" --fold test -n 96 -k 8 --max-steps 10 --memory off --json > "$OUT/$L-coin-test.json"
crl run "$COIN" -n 48 -k 8 --max-steps 10 --json > "$OUT/$L-coin-collect.json"
crl eval "$COIN" --fold dev -n 96 -k 8 --max-steps 10 --json > "$OUT/$L-coin-mem.json"
