#!/bin/bash
# #14 lever: SFT toward the posterior (finetune.sft_targets=soft) on the twc round-1 banks, equal compute
# to the hard adapter (12 optimizer steps of 8 rows), then adapter alone / adapter + memory on the
# confirmation seeds, paired against base + memory and the hard adapter already played in /work/runs/c14.
source /work/runs/wt22/.venv/bin/activate
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_THREADS=1 CRL_LLM__DTYPE=bf16
cd /work/runs/soft
TASK='twx/twc?numLocations=1&numItemsToPutAway=2'
train() {  # $1 = r0|r1, $2 = snapshot, $3 = the run that came after the hard adapter (left out of its data)
  H=home-$1-train
  [ -s $1.adapter ] && return
  rm -rf $H home-$1-build $1-ds; cp -a /work/runs/twc/$2 $H; cp -a /work/runs/twc/$2 home-$1-build
  echo "$(date +%T) build $1" >> queue.log
  crl --home home-$1-build memory rebuild --drop-run $3 --yes > $1-drop.log 2>&1 || exit 1
  CRL_FINETUNE__SFT_TARGETS=soft crl --home home-$1-build dataset build sft --task "$TASK" --out $PWD/$1-ds --json > $1-dataset.json 2> $1-dataset.log || exit 1
  DS=$PWD/$1-ds
  echo "$(date +%T) train $1 $DS" >> queue.log
  crl --home $H finetune sft --dataset $DS --no-gate --max-steps 12 --json > $1-sft.json 2> $1-sft.log || exit 1
  python3 -c "import json;d=json.load(open('$1-sft.json'));print(d.get('adapter') or d.get('id') or d['adapter_id'])" > $1.adapter
  echo "$(date +%T) trained $1 $(cat $1.adapter)" >> queue.log
}
evalq() {  # $1 = r0|r1, then lines "fold arm" in $2
  while read fold arm; do
    out=$1-$fold-$arm; [ -s $out.json ] && continue
    rm -rf home-$out; cp -a home-$1-train home-$out
    A=$(cat $1.adapter)
    case $arm in
      soft-alone) extra=(--adapter $A --memory off); envs=(CRL_MEMORY__ENABLED=false);;
      soft-mem-plain) extra=(--adapter $A); envs=(CRL_RETRIEVAL__EC_LOOP_ERASURE=false);;
    esac
    echo "$(date +%T) start $out" >> queue.log
    env "${envs[@]}" crl --home home-$out eval "$TASK" --fold $fold -n 32 -k 8 --policy posterior --max-steps 10 "${extra[@]}" --json > $out.json.tmp 2> $out.log \
      && mv $out.json.tmp $out.json
    echo "$(date +%T) end $out $(grep -o '"successes": [0-9]*' $out.json 2>/dev/null)" >> queue.log
  done < $2
}
printf "test soft-alone\ntest soft-mem-plain\ndev soft-alone\ndev soft-mem-plain\n" > arms.list
train r0 A/skills-sft/repeat-0-after-1 20261206-021427-6e57
(evalq r0 arms.list) &
train r1 C/skills-sft/repeat-1-after-1 20261206-015137-c41b
evalq r1 arms.list
wait
echo "$(date +%T) all done" >> queue.log
