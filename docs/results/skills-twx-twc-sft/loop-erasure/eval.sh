#!/bin/bash
# Repeat 0's round-1 snapshot (A/skills-sft/repeat-0-after-1) copied to homeA; only the credit flag differs
# from the run's own dev evaluation. per_seed.json holds its outcomes beside the run's two; compare.py pairs them.
export HF_HUB_OFFLINE=1 CRL_THREADS=1 CRL_LLM__DTYPE=bf16 CRL_RETRIEVAL__EC_LOOP_ERASURE=true
crl --home homeA eval 'twx/twc?numLocations=1&numItemsToPutAway=2' --fold dev -n 32 -k 8 --policy posterior \
  --adapter sft-20261206-014628-d56b --max-steps 10 --json > eval-loop-erased.json
