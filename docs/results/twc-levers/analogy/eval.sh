#!/bin/bash
# $1 = name, $2 = snapshot home, then extra args (--adapter PATH for adapter + memory); FOLD=dev|test;
# the experiment's seeds and settings, analogy on (ANALOGY=false: off). WT = the worktree (wt33 = 149cb23)
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_THREADS=1 CRL_LLM__DTYPE=bf16
export CRL_RETRIEVAL__EC_ANALOGY=${ANALOGY:-true}
TASK='twx/twc?numLocations=1&numItemsToPutAway=2'
name=$1 src=$2; shift 2
cd /work/runs/an; rm -rf home-$name; cp -a $src home-$name
${WT:-/work/runs/wt33}/.venv/bin/crl --home home-$name eval "$TASK" --fold ${FOLD:-dev} -n 32 -k 8 --policy posterior --max-steps 10 "$@" --json > $name.json.tmp 2> $name.log && mv $name.json.tmp $name.json
echo "$(date +%T) end $name $(grep -o '"successes": [0-9]*' $name.json 2>/dev/null)" >> done.log
