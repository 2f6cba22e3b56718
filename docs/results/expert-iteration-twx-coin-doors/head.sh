#!/bin/bash
# usage: head.sh WORK-lr   (the workdir copy of run.sh's block 3; run from a checkout at dac4de5)
# the DPO (lr 2e-4) adapter at stop 57's loop rules (follow-through on), alone and with its own bank
# (collected at d705bdd, aligned to it), the same 96 dev seeds; compared with stop 57's base arms
set -u
H=$1/.crl
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_LLM__DTYPE=bf16 CRL_THREADS=1
COIN="twx/coin?numLocations=5&numDistractorItems=0&includeDoors=1"
AD=$(ls "$H/adapters" | grep '^dpo-')
CRL_MEMORY__ENABLED=false crl --home "$H" eval "$COIN" --fold dev -n 96 -k 8 --max-steps 10 --memory off --adapter "$AD" --json > alone.json
crl --home "$H" eval "$COIN" --fold dev -n 96 -k 8 --max-steps 10 --adapter "$AD" --json > memory.json
