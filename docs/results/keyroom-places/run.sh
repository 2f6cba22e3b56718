#!/bin/bash
# usage: run.sh WT KEYWORK OUT
#   WT: a checkout with its own .venv, at the commit to measure (stop 63: 5abbafc places only,
#       2dc6f5e places and the exhausted frontier); KEYWORK: the workdir of
#   ../expert-iteration-keyroom-key-head/run.sh (its final bank and round-2 adapter); OUT: where the rows go.
# Every arm on the 96 dev seeds its task's bench uses, bank frozen (evaluations never write memory).
set -eu
WT=$1; KEYWORK=$2; OUT=$3
source "$WT/.venv/bin/activate"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_THREADS=1 CRL_LLM__DTYPE=bf16 PYTHONPATH=$WT
cd "$WT"
A=docs/results/keyroom-places/arm.py; H=$KEYWORK/.crl; EMPTY=$OUT/home
AD=$(ls -d "$H"/adapters/sft-*/adapter | sort | tail -1)   # round 2's adapter
python $A "$H" keyroom/key 96 "$OUT/key-adapter-alone.json" --adapter "$AD"
python $A "$EMPTY" keyroom/key 96 "$OUT/key-alone.json"
python $A "$H" keyroom/key 96 "$OUT/key-base-memory.json" --memory
python $A "$H" keyroom/key 96 "$OUT/key-adapter-memory.json" --memory --adapter "$AD"
python $A "$EMPTY" keyroom/compound 96 "$OUT/compound-alone.json"
for doors in 0 1; do
    CRL_AGENT__MAX_STEPS=10 python $A "$EMPTY" "twx/coin?numLocations=5&numDistractorItems=0&includeDoors=$doors" 96 \
        "$OUT/coin-doors$doors-alone.json"
done
