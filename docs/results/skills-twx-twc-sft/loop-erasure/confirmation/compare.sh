#!/bin/bash
# crl compare for each (repeat, fold): the round-1 adapter and bank of the skills+sft arm, under plain and
# loop-erased credit, against the adapter alone, the base model on the same bank, arm (c) and the model alone.
set -e
export HF_HUB_OFFLINE=1 COLUMNS=200
T=.   # the stop-47 run folders A, B, C
ev() { echo $1/evals/$(ls -t $1/evals | head -1); }
crl compare "adapter+memory, loop-erased=$(ev home-r0-test-adapter-mem-le)" "adapter+memory, plain=$(ev home-r0-test-adapter-mem-plain)" \
  "adapter alone=$(ev home-r0-test-adapter-alone)" "base+memory, loop-erased=$(ev home-r0-test-base-mem-le)" \
  "(c) base+memory before SFT, plain=$T/A/skills/repeat-0/evals/20261206-011545-8487" "model alone=$T/B/none/repeat-0/evals/20261206-005210-df78" --all-pairs --json > r0-test.json
crl compare "adapter+memory, loop-erased=homeA/evals/20261206-024741-ac0d" "adapter+memory, plain=$T/A/skills-sft/repeat-0-after-1/evals/20261206-022337-a528" \
  "adapter alone=$T/A/skills-sft/repeat-0-after-1/evals/20261206-020525-2266" "base+memory, loop-erased=$(ev home-r0-dev-base-mem-le)" \
  "(c) base+memory before SFT, plain=$T/A/skills/repeat-0/evals/20261206-010423-c364" "model alone=$T/B/none/repeat-0/evals/20261206-004445-2506" --all-pairs --json > r0-dev.json
crl compare "adapter+memory, loop-erased=$(ev home-r1-test-adapter-mem-le)" "adapter+memory, plain=$(ev home-r1-test-adapter-mem-plain)" \
  "adapter alone=$(ev home-r1-test-adapter-alone)" "base+memory, loop-erased=$(ev home-r1-test-base-mem-le)" \
  "(c) base+memory before SFT, plain=$T/C/skills/repeat-1/evals/20261206-011950-422d" "model alone=$T/B/none/repeat-0/evals/20261206-005210-df78" --all-pairs --json > r1-test.json
crl compare "adapter+memory, loop-erased=$(ev home-r1-dev-adapter-mem-le)" "adapter+memory, plain=$T/C/skills-sft/repeat-1-after-1/evals/20261206-020523-3a77" \
  "adapter alone=$T/C/skills-sft/repeat-1-after-1/evals/20261206-014306-26af" "base+memory, loop-erased=$(ev home-r1-dev-base-mem-le)" \
  "(c) base+memory before SFT, plain=$T/C/skills/repeat-1/evals/20261206-011034-dad5" "model alone=$T/B/none/repeat-0/evals/20261206-004445-2506" --all-pairs --json > r1-dev.json
