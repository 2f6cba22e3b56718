#!/bin/bash
# usage: run.sh WT WORK   (WT: a checkout with its own .venv)
# #14's five arms on keyroom/key at the commit WT holds, with every default there: the command of
# "Measured: expert iteration under the posterior" (two SFT rounds) rerun in a fresh workdir.
set -eu
WT=$1; WORK=$2
source "$WT/.venv/bin/activate"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_THREADS=1 CRL_LLM__DTYPE=bf16
cd "$WT"
python -m bench.finetune_bench --expert-iteration --task keyroom/key --policy posterior --collect 40 \
    --eval 96 --eval-memory 96 --eval-random --sft-rounds 2 --dpo-steps 0 --workdir "$WORK"
python -m bench.complementarity "$WORK/expert-iteration.jsonl" --games
python -m bench.complementarity "$WORK/expert-iteration.jsonl" --games --json > "$WORK/complementarity.json"
