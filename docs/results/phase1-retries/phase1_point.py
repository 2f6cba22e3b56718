"""The `skills` arm's first point ("phase 1 + synthesis") alone, with and without phase-1 retries.

Plays phase 1 of `crl experiment skills` (the stop-45 keyroom recipe's settings) for one repeat,
runs its synthesis pass, and, with `--eval`, plays the dev evaluation of that point; prints one JSON
line: what phase 1 played and won, the segments by skill, the stitches validated, the steps charged,
and the dev outcomes by seed (so two settings pair seed by seed).

Usage: python phase1_point.py --repeat 1 --retries 2 --home /tmp/p1-r1-2 [--eval]
(environment as the three-repeat run: CRL_LLM__DTYPE=bf16 CRL_RETRIEVAL__EC_LOOP_ERASURE=true)
"""

import argparse
import json
import shutil
from pathlib import Path

from crl.agent.app import start_run
from crl.agent.skills_experiment import SkillsExperiment, SkillsSpec, arm_settings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, required=True)
    parser.add_argument("--retries", type=int, default=0)
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--eval", action="store_true")
    args = parser.parse_args()
    spec = SkillsSpec(
        task="keyroom/compound", arms=["skills"], phase1=16, budget=8, eval_episodes=32, repeats=3,
        overrides={"agent": {"parallel": 8}}, retries=args.retries,
    )  # fmt: skip
    shutil.rmtree(args.home, ignore_errors=True)
    experiment = SkillsExperiment(spec, args.home / "out")
    settings = arm_settings(spec, "skills", args.home / "data")
    settings.llm.seed = args.repeat
    model = experiment.chat_model(settings)
    steps, replay, plays = experiment._phase1(settings, args.repeat, model)
    synthesis = experiment._synthesize(settings).report.to_dict()
    line = {
        "repeat": args.repeat,
        "retries": args.retries,
        "plays": plays,
        "env_steps": steps + replay + synthesis["replay_env_steps"],
        "segments_by_skill": synthesis["segments_by_skill"],
        "stitches_validated": synthesis["stitches_validated"],
        "stitch_rejected": synthesis["stitch_rejected"],
    }
    if args.eval:
        dev = start_run(settings, spec.task, spec.eval_episodes, fold="dev", kind="eval", model=model)
        line["dev"] = {str(e.seed): bool(e.success) for e in dev.episodes}
        line["dev_successes"] = sum(line["dev"].values())
    print(json.dumps(line))


if __name__ == "__main__":
    main()
