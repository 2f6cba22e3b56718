"""The from-scratch DRRN baseline on one task: dev success against environment steps, as JSON lines.

One line per evaluation (`env_steps` learning steps, `eval_env_steps`, `all_env_steps`,
`dev_success`, ...), then a summary line with `"final": true`. No pretrained model is involved.

    python -m bench.drrn_baseline --task keyroom/key --steps 20000 --eval-every 2000 --eval-episodes 32
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, fields

from crl.agent.baselines.drrn import DRRNConfig
from crl.agent.baselines.learner import train


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="keyroom/key")
    ap.add_argument("--steps", type=int, default=20_000, help="environment steps to learn from")
    ap.add_argument("--eval-every", type=int, default=2000)
    ap.add_argument("--eval-episodes", type=int, default=32, help="dev seeds per evaluation")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint", default=None, help="save here after each evaluation; resume when it exists")
    ap.add_argument("--progress", action="store_true", help="draw a progress bar on stderr")
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"a DRRN setting ({', '.join(f.name for f in fields(DRRNConfig))}); repeatable",
    )
    args = ap.parse_args(argv)

    config = DRRNConfig.from_dict(_settings(args.set))
    started = time.monotonic()
    curve = train(
        args.task,
        args.steps,
        seed=args.seed,
        eval_every=args.eval_every,
        eval_episodes=args.eval_episodes,
        config=config,
        checkpoint=args.checkpoint,
        progress=args.progress,
        on_point=lambda p: print(json.dumps({"task": args.task, "seed": args.seed} | p.to_dict()), flush=True),
    )
    last = curve[-1]
    summary = {
        "final": True,
        "task": args.task,
        "seed": args.seed,
        "env_steps": last.env_steps,
        "all_env_steps": last.all_env_steps,
        "dev_success": last.dev_success,
        "best_dev_success": max(p.dev_success for p in curve),
        "wall_s": round(time.monotonic() - started, 1),
        "config": asdict(config),
    }
    print(json.dumps(summary), flush=True)


def _settings(pairs: list[str]) -> dict:
    """`["lr=0.0005", "encoder=bag"]` as typed values of the config's fields."""
    types = {f.name: f.type for f in fields(DRRNConfig)}
    values: dict = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or key not in types:
            raise SystemExit(f"--set {pair!r}: expected KEY=VALUE with KEY one of {', '.join(types)}")
        kind = types[key]
        if kind == "bool":
            values[key] = raw.lower() in ("1", "true", "yes")
        elif kind == "int":
            values[key] = int(raw)
        elif kind == "float":
            values[key] = float(raw)
        else:
            values[key] = raw
    return values


if __name__ == "__main__":
    main()
