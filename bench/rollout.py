"""Rollout throughput of the embedded model: parallel 1 vs 8 (a benchmark, not a test).

The model alone (policy llm, no memory), so the figures are the loop's and the model's.

Prints episodes/min, steps/s and generated tokens/s for each setting.

    python bench/rollout.py [--task keyroom/key] [--episodes 16] [--parallel 1,8] [--dtype auto]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from crl.agent.app import start_run  # noqa: E402
from crl.agent.config import load_settings  # noqa: E402
from crl.agent.llm.factory import build_chat_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="keyroom/key")
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--parallel", default="1,8")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--home", default=os.environ.get("CRL_HOME", ".crl"), help="where the model cache lives")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    base = load_settings({"home": args.home, "llm": {"dtype": args.dtype}})
    t = time.monotonic()
    model = build_chat_model(base)
    load_s = time.monotonic() - t
    rows = []
    with tempfile.TemporaryDirectory() as runs_home:
        for k in [int(x) for x in args.parallel.split(",")]:
            settings = load_settings(
                {
                    "home": runs_home,
                    "llm": {"dtype": args.dtype},
                    "agent": {"parallel": k, "policy": "llm", "memory": "off"},
                    "memory": {"enabled": False},
                }
            )
            result = start_run(settings, args.task, args.episodes, model=model)
            r = result.report()
            rows.append(
                {
                    "parallel": k,
                    "episodes": r["episodes"],
                    "episodes_per_min": 60 * r["episodes"] / r["wall_seconds"],
                    "steps_per_s": r["steps_per_s"],
                    "generated_tokens_per_s": r["generated_tokens_per_s"],
                    "success_rate": r["success_rate"],
                    "wall_seconds": r["wall_seconds"],
                }
            )
    if args.json:
        print(json.dumps({"model": model.name, "load_seconds": load_s, "task": args.task, "rows": rows}, indent=2))
        return
    print(f"model {model.name} (loaded in {load_s:.1f}s), task {args.task}, {args.episodes} episodes per setting")
    print(f"{'parallel':>8} {'episodes/min':>13} {'steps/s':>8} {'gen tok/s':>10} {'success':>8} {'wall s':>7}")
    for r in rows:
        print(
            f"{r['parallel']:>8} {r['episodes_per_min']:>13.1f} {r['steps_per_s']:>8.2f} "
            f"{r['generated_tokens_per_s']:>10.1f} {r['success_rate']:>8.0%} {r['wall_seconds']:>7.1f}"
        )
    if len(rows) > 1:
        print(
            f"speed-up parallel {rows[-1]['parallel']} vs {rows[0]['parallel']}: "
            f"{rows[-1]['episodes_per_min'] / rows[0]['episodes_per_min']:.2f}x episodes/min"
        )


if __name__ == "__main__":
    main()
