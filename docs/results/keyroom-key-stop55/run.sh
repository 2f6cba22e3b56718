#!/bin/bash
# usage: run.sh BEFORE_CHECKOUT AFTER_CHECKOUT OUT   (each checkout with its own .venv)
# keyroom/key, the posterior with memory: 32 dev seeds before any training (the model alone, the bank
# empty) and after 16 train episodes, two repeats; before (4ba420f) and after (1746897) the fix that
# stops counting a scored argmax the posterior passed over as tried.
set -u
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 ANONYMIZED_TELEMETRY=False CRL_LLM__DTYPE=bf16 CRL_THREADS=1
for L in after before; do
  if [ $L = before ]; then WT=$1; else WT=$2; fi
  CRL_HOME=$3/home-$L "$WT/.venv/bin/crl" experiment curve keyroom/key --arms posterior --budget 16 \
    --eval-every 16 --eval-episodes 32 --repeats 2 --out "$3/$L"
done
