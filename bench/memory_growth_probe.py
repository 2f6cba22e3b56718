"""The model alone, called many times with prompts of varying length: RSS per call (a probe, not a test).

Isolates what `bench/memory_growth.py` sees in a whole eval: no environment, no memory, one
`score_actions` (or `generate`) call at a time on random keyroom-like words, the resident set
size printed every tenth of the calls. `--pad-multiple 1` is the behaviour before the fix;
`--lengths bucketed` draws lengths in steps of 32 words; `--trim` calls glibc's `malloc_trim`
every 10 calls (it does not stop the growth: the memory is held, not free).

    CRL_THREADS=1 CRL_LLM__DTYPE=bf16 python -m bench.memory_growth_probe --mode score --calls 300 --pad-multiple 1
"""

from __future__ import annotations

import argparse
import ctypes
import os
import random
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from bench.memory_growth import rss_mb  # noqa: E402

WORDS = "the brass key oak door north south room table chest open take look go examine".split()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", default="score", choices=["score", "generate"])
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--lengths", default="vary", choices=["vary", "fixed", "bucketed"])
    ap.add_argument("--pad-multiple", type=int, default=None, help="override the model's padding (1: before the fix)")
    ap.add_argument("--trim", action="store_true")
    args = ap.parse_args()

    from crl.agent.config import load_settings
    from crl.agent.llm.base import GenerationConfig
    from crl.agent.llm.factory import build_chat_model

    with tempfile.TemporaryDirectory() as home:
        model = build_chat_model(load_settings({"home": home}))
    if args.pad_multiple is not None:
        model.pad_multiple = args.pad_multiple
    libc = ctypes.CDLL("libc.so.6") if args.trim else None
    rng = random.Random(0)
    print(f"{args.mode}, {args.lengths} lengths, pad multiple {model.pad_multiple}: start {rss_mb():.0f} MB")
    t = time.monotonic()
    every = max(1, args.calls // 10)
    for i in range(args.calls):
        n = {"vary": rng.randint(50, 400), "fixed": 250, "bucketed": rng.randint(2, 12) * 32}[args.lengths]
        text = " ".join(rng.choice(WORDS) for _ in range(n))
        messages = [{"role": "user", "content": text}, {"role": "assistant", "content": "Action:"}]
        if args.mode == "score":
            actions = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))) for _ in range(rng.randint(3, 10))]
            model.score_actions([messages], [actions])
        else:
            tokens = rng.randint(4, 24) if args.lengths == "vary" else 12
            model.generate([messages], GenerationConfig(max_new_tokens=tokens, temperature=0))
        if libc is not None and i % 10 == 0:
            libc.malloc_trim(0)
        if i % every == 0 or i == args.calls - 1:
            print(f"{i + 1:>5} calls {time.monotonic() - t:>6.0f} s {rss_mb():>7.0f} MB", flush=True)


if __name__ == "__main__":
    main()
