#!/bin/bash
# usage: run.sh WT WORK [DOORS]   (WT: a checkout with its own .venv; DOORS: 0 or 1, default 0)
# #14's five arms on twx/coin (five rooms, 10 steps) at the commit WT holds, with every default
# there (the loop rules of stops 54-57 included): random, base alone, 2 x 48 train games collected
# with memory, base + memory, one SFT round, adapter alone, 16 aligning games, adapter + memory, gate.
set -eu
WT=$1; WORK=$2; DOORS=${3:-0}
TASK="twx/coin?numLocations=5&numDistractorItems=0&includeDoors=$DOORS"
source "$WT/.venv/bin/activate"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_THREADS=1 CRL_LLM__DTYPE=bf16
cd "$WT"
python -m bench.finetune_bench --expert-iteration --task "$TASK" --max-steps 10 \
    --collect 48 --collect-passes 2 --eval 96 --eval-memory 96 --eval-random --sft-rounds 1 --align 16 \
    --dpo-steps 0 --workdir "$WORK"
python -m bench.complementarity "$WORK/expert-iteration.jsonl" --games
python -m bench.complementarity "$WORK/expert-iteration.jsonl" --games --json > "$WORK/complementarity.json"
