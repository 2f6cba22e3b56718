#!/bin/bash
# usage: run.sh WT WORK   (WT: a checkout with its own .venv; measured at d705bdd, stop 56's loop
# rules, with 690387c's --dpo-learning-rate flag cherry-picked onto it for step 3)
# #14's arms on coin with doors: one expert-iteration round (SFT), a DPO round on top at the default
# learning rate, then the DPO round again at the SFT's learning rate in a copy of the workdir.
set -eu
WT=$1; WORK=$2
TASK="twx/coin?numLocations=5&numDistractorItems=0&includeDoors=1"
source "$WT/.venv/bin/activate"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_THREADS=1 CRL_LLM__DTYPE=bf16
cd "$WT"
ei() { python -m bench.finetune_bench --expert-iteration --task "$TASK" --max-steps 10 \
    --collect 48 --collect-passes 2 --eval 96 --eval-memory 96 --eval-random --sft-rounds 1 --align 16 "$@"; }
# 1. random, base alone, 2 x 48 train games collected with memory, base + memory, SFT, adapter alone,
#    16 aligning games, adapter + memory, gate
ei --dpo-steps 0 --workdir "$WORK"
# 2. the same workdir: every stage above reused, then the DPO round (10 steps, lr 2e-5) on the SFT adapter
ei --dpo-steps 10 --workdir "$WORK"
python -m bench.complementarity "$WORK/expert-iteration.jsonl"
# 3. a copy without the DPO round's training, alignment and promotion, then DPO at lr 2e-4
cp -a "$WORK" "$WORK-lr"
python - "$WORK-lr/expert-iteration.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
drop = ("dpo train", "eval dpo", "align dpo", "gate dpo")
open(sys.argv[1], "w").writelines(
    json.dumps(r) + "\n" for r in rows if not r.get("stage", "").startswith(drop) and "complementarity" not in r
)
PY
crl --home "$WORK-lr/.crl" adapters rollback --json
DPO=$(ls "$WORK-lr/.crl/adapters" | grep '^dpo-'); rm -rf "$WORK-lr/.crl/adapters/$DPO" "$WORK-lr/.crl/finetune/jobs/$DPO"
ALIGN=$(ls "$WORK/.crl/runs" | sort | tail -1)  # the DPO adapter's 16 aligning games, the last run played
crl --home "$WORK-lr/.crl" memory rm $(for i in $(seq -w 0 15); do echo "$ALIGN-00$i"; done) -y --json
ei --dpo-steps 10 --dpo-learning-rate 2e-4 --workdir "$WORK-lr"
python -m bench.complementarity "$WORK-lr/expert-iteration.jsonl"
