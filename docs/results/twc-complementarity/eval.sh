#!/bin/bash
# One arm on twc: NAME SNAPSHOT [extra `crl eval` args]. Env: WT (a checkout with its .venv), FOLD
# (dev), N (96), SEED (0: offset into the fold). The arm plays on its own copy of SNAPSHOT
# (home-NAME), so the bank stays frozen; `crl eval --json` goes to NAME.json.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_THREADS=1 CRL_LLM__DTYPE=bf16
TASK='twx/twc?numLocations=1&numItemsToPutAway=2'
name=$1 src=$2; shift 2
rm -rf home-$name; cp -a $src home-$name
$WT/.venv/bin/crl --home home-$name eval "$TASK" --fold ${FOLD:-dev} --seed ${SEED:-0} -n ${N:-96} -k 8 \
  --policy posterior --max-steps 10 "$@" --json > $name.json 2> $name.err
