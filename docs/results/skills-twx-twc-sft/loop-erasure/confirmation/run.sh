#!/bin/bash
# Stop 48: the loop-erased-credit lead on seeds that did not choose it. Each arm plays on its own copy of a
# round-1 snapshot of the stop-47 run (A/skills-sft/repeat-0-after-1, C/skills-sft/repeat-1-after-1), 32 episodes,
# memory frozen. Then `crl compare` per (repeat, fold): compare.sh.
export HF_HUB_OFFLINE=1 CRL_THREADS=1 CRL_LLM__DTYPE=bf16
TASK='twx/twc?numLocations=1&numItemsToPutAway=2'
play() {  # $1 = name, $2 = snapshot, $3 = adapter id, $4 = fold, $5 = arm
  rm -rf home-$1; cp -a $2 home-$1
  case $5 in
    adapter-mem-le) env CRL_RETRIEVAL__EC_LOOP_ERASURE=true crl --home home-$1 eval "$TASK" --fold $4 -n 32 -k 8 --policy posterior --max-steps 10 --adapter $3 --json ;;
    adapter-mem-plain) crl --home home-$1 eval "$TASK" --fold $4 -n 32 -k 8 --policy posterior --max-steps 10 --adapter $3 --json ;;
    adapter-alone) env CRL_MEMORY__ENABLED=false crl --home home-$1 eval "$TASK" --fold $4 -n 32 -k 8 --policy posterior --max-steps 10 --adapter $3 --memory off --json ;;
    base-mem-le) env CRL_RETRIEVAL__EC_LOOP_ERASURE=true crl --home home-$1 eval "$TASK" --fold $4 -n 32 -k 8 --policy posterior --max-steps 10 --json ;;
  esac > $1.json
}
R0="A/skills-sft/repeat-0-after-1 sft-20261206-014628-d56b"; R1="C/skills-sft/repeat-1-after-1 sft-20261206-013352-ec95"
for arm in adapter-mem-le adapter-mem-plain adapter-alone base-mem-le; do play r0-test-$arm $R0 test $arm; play r1-test-$arm $R1 test $arm; done
play r0-dev-base-mem-le $R0 dev base-mem-le   # repeat 0's other dev arms are the stop-47 run's and loop-erasure/eval.sh's
play r1-dev-adapter-mem-le $R1 dev adapter-mem-le; play r1-dev-base-mem-le $R1 dev base-mem-le
