#!/usr/bin/env bash
# Mined rules vs none on keyroom/compound where base + memory already wins some games.
# The bank: 16 train episodes each of keyroom/key, door and chest, then 32 of keyroom/compound
# (posterior policy, memory on), all on the train fold. Rules are mined once from it. Then the same
# 48 dev seeds are played with the mined rules in prompts (retrieval.k_rules 5) and without (0).
# Evaluations do not write to memory, so both read the same bank.   ./run.sh OUT
set -euo pipefail
OUT=${1:?usage: run.sh OUT}
mkdir -p "$OUT"
export CRL_HOME="$OUT/home" CRL_LLM__DTYPE=bf16 CRL_THREADS=${CRL_THREADS:-1}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False
for v in key door chest; do
    crl run "keyroom/$v" -n 16 --json > "$OUT/phase1-$v.json"
done
crl run keyroom/compound -n 32 --json > "$OUT/compound-train.json"
crl synth mine --family keyroom --json > "$OUT/mining.json"
crl eval keyroom/compound --fold dev -n 48 --json > "$OUT/with_rules.json"
CRL_RETRIEVAL__K_RULES=0 crl eval keyroom/compound --fold dev -n 48 --json > "$OUT/no_rules.json"
with=$(python -c "import json,sys; print(json.load(open(sys.argv[1]))['run_id'])" "$OUT/with_rules.json")
none=$(python -c "import json,sys; print(json.load(open(sys.argv[1]))['run_id'])" "$OUT/no_rules.json")
crl compare "rules=$with" "none=$none" --games --json > "$OUT/compare.json"
