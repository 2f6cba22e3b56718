#!/bin/bash
# Two lanes on the 2 cores. Lane A: held rule (wt23) on base+memory (loop-erased credit, as c14's) and the model alone.
# Lane B: soft-target r1 training (wt22), soft arms on test, then held rule on the adapter arms (test).
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_THREADS=1 CRL_LLM__DTYPE=bf16
TASK='twx/twc?numLocations=1&numItemsToPutAway=2'
snap() { case $1 in r0) echo /work/runs/twc/A/skills-sft/repeat-0-after-1;; r1) echo /work/runs/twc/C/skills-sft/repeat-1-after-1;; esac; }
hard() { case $1 in r0) echo sft-20261206-014628-d56b;; r1) echo sft-20261206-013352-ec95;; esac; }
play() {  # dir venv rep fold arm home-source adapter
  local dir=$1 venv=$2 rep=$3 fold=$4 arm=$5 src=$6 ad=$7 out=$3-$4-$5
  cd $dir; [ -s $out.json ] && return
  rm -rf home-$out; cp -a $src home-$out
  local extra=() envs=(CRL_RETRIEVAL__EC_LOOP_ERASURE=false)
  case $arm in
    base-mem-le) envs=(CRL_RETRIEVAL__EC_LOOP_ERASURE=true);;
    adapter-mem|soft-mem) extra=(--adapter $ad);;
    adapter-alone|soft-alone) extra=(--adapter $ad --memory off); envs=(CRL_MEMORY__ENABLED=false);;
    none) extra=(--memory off); envs=(CRL_MEMORY__ENABLED=false);;
  esac
  echo "$(date +%T) start $dir/$out" >> /work/runs/held/lanes.log
  env "${envs[@]}" $venv/bin/crl --home home-$out eval "$TASK" --fold $fold -n 32 -k 8 --policy posterior --max-steps 10 "${extra[@]}" --json > $out.json.tmp 2> $out.log \
    && mv $out.json.tmp $out.json
  echo "$(date +%T) end $dir/$out $(grep -o '"successes": [0-9]*' $out.json 2>/dev/null)" >> /work/runs/held/lanes.log
}
H=/work/runs/held; S=/work/runs/soft; V23=/work/runs/wt23/.venv; V22=/work/runs/wt22/.venv
V25=/work/runs/wt25/.venv
laneA() {
  while pgrep -f "home-r0-test-base-mem-le eval" > /dev/null; do sleep 20; done
  [ -s $H/r0-test-base-mem-le.json.tmp ] && mv $H/r0-test-base-mem-le.json.tmp $H/r0-test-base-mem-le.json
  echo "$(date +%T) end (orphan) r0-test-base-mem-le $(grep -o '"successes": [0-9]*' $H/r0-test-base-mem-le.json)" >> $H/lanes.log
  for rf in "r1 test" "r0 dev" "r1 dev"; do set -- $rf; play $H $V23 $1 $2 base-mem-le $(snap $1); done
  mkdir -p /work/runs/roles
  for rf in "r0 test" "r0 dev"; do set -- $rf; play /work/runs/roles $V25 $1 $2 base-mem-le $(snap $1); done
}
laneB() {
  while pgrep -f "home-r1-train finetune" > /dev/null; do sleep 20; done
  cd $S; python3 -c "import json;d=json.load(open('r1-sft.json'));print(d.get('adapter') or d.get('id') or d['adapter_id'])" > r1.adapter || exit 1
  echo "$(date +%T) trained r1 $(cat r1.adapter)" >> /work/runs/held/lanes.log
  for rep in r0 r1; do for arm in soft-alone soft-mem; do play $S $V22 $rep test $arm $S/home-$rep-train $(cat $S/$rep.adapter); done; done
  mkdir -p /work/runs/roles
  for rf in "r1 test" "r1 dev"; do set -- $rf; play /work/runs/roles $V25 $1 $2 base-mem-le $(snap $1); done
}
laneA & laneB & wait
echo "$(date +%T) all done" >> /work/runs/held/lanes.log
