"""Scoring admissible actions vs generating a reply, on keyroom and TextWorldExpress states (a
benchmark, not a test).

For the first states of a task's games (one per seed, prompted as the agent loop prompts the
embedded model: primed with "Action:"), measures per dtype and parallelism:

- score:    `ActionScorer` (mean token log-likelihood of every admissible action, one prompt
            pass, then the candidates of each prompt packed into its row after its KV cache;
            `--repeat-cache` copies the cache once per candidate row instead, the older pass)
- generate: `LocalChatModel.generate`, 6 new tokens, the reply parsed onto an admissible action
- choice:   transformers' `DecisionPipeline` (labels A, B, ... read from next-token logits;
            it does not batch, so parallel 1 only)

and prints ms per decision, decisions per second, usable (valid) actions, and agreement with the
reference's first action (keyroom's solver; on `twx/...` tasks the engine's gold path, past its opening `look around`). Times on
2 shared cores are noisy; compare rows of one run.

    python bench/scoring_bench.py [--task keyroom/key] [--states 8] [--parallel 1,8] [--dtypes fp32,bf16] [--repeat-cache]
    python bench/scoring_bench.py --task "twx/coin?numLocations=3&numDistractorItems=0&includeDoors=0"
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from crl.agent.llm.base import GenerationConfig  # noqa: E402
from crl.agent.llm.local import LocalChatModel  # noqa: E402
from crl.agent.llm.scoring import ActionScorer, ChoiceScorer  # noqa: E402
from crl.agent.parsing import parse_reply  # noqa: E402
from crl.agent.session import DEFAULT_STOP, EpisodeSession, LoopConfig  # noqa: E402
from crl.memory.trajectory import Episode  # noqa: E402
from crl.tasks.keyroom import KeyroomEnv, solve  # noqa: E402
from crl.tasks.registry import make_env  # noqa: E402


@dataclass
class State:
    """One decision to make: the primed chat, its admissible actions, the reference's action."""

    messages: list[dict]
    state_text: str
    admissible: list[str]
    solver_action: str


def reference_action(env) -> str:
    """The first action of a known-good path: keyroom's solver, or the TextWorldExpress gold path's
    first move past its opening `look around` (every gold path starts with it)."""
    if isinstance(env, KeyroomEnv):
        return solve(env)[0]
    gold = env.gold_actions()
    return next((a for a in gold if a not in ("look around", "inventory")), gold[0])


def task_states(model: LocalChatModel, task: str, seeds: list[int]) -> list[State]:
    """The first state of each seed, prompted as `EpisodeSession` prompts the embedded model."""
    config = LoopConfig(react=False, prefill=True)
    count_text = lambda text: model.count_tokens([{"role": "user", "content": text}])  # noqa: E731
    states = []
    env = make_env(task)
    try:
        for seed in seeds:
            episode = Episode(episode_id=f"bench-{seed}", run_id="bench", task=task, seed=seed, goal="")
            session = EpisodeSession(env, episode, config, count_text, model.count_tokens)
            obs = session.observation
            if not obs.admissible_actions:
                raise SystemExit(f"{task} lists no admissible actions: nothing to score")
            states.append(
                State(
                    session.messages(),
                    f"Goal: {obs.goal}\n{obs.text}",
                    list(obs.admissible_actions),
                    reference_action(env),
                )
            )
    finally:
        env.close()
    return states


def _batches(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _timed(run, batches) -> tuple[list, float]:
    """Run every batch once after a warm-up; (results in order, seconds)."""
    run(batches[0])
    start = time.perf_counter()
    results = [r for batch in batches for r in run(batch)]
    return results, time.perf_counter() - start


def measure(
    model: LocalChatModel, states: list[State], parallel: list[int], dtype: str, packed: bool = True
) -> list[dict]:
    """Rows of the table for one loaded model (`packed`: the scorer's packed candidate pass, else the
    cache repeated per candidate row)."""
    scorer = ActionScorer.for_chat_model(model, packed=packed)
    generation = GenerationConfig(max_new_tokens=6, stop=list(DEFAULT_STOP))
    prompt_tokens = statistics.mean(model.count_tokens(s.messages) for s in states)

    def score(batch):
        dists = scorer.score([model.render(s.messages) for s in batch], [s.admissible for s in batch])
        return [d.best for d in dists]

    def generate(batch):
        replies = model.generate([s.messages for s in batch], generation)
        return [parse_reply("Action:" + r.text, s.admissible).action for s, r in zip(batch, replies)]

    rows = []
    methods = [("score", score), ("generate", generate)]
    for k in parallel:
        for name, run in methods:
            actions, seconds = _timed(run, _batches(states, k))
            rows.append(_row(name, dtype, k, states, actions, seconds, prompt_tokens))
    choice = ChoiceScorer.for_chat_model(model)
    actions, seconds = _timed(
        lambda batch: [d.best for d in choice.score([s.state_text for s in batch], [s.admissible for s in batch])],
        _batches(states, 1),
    )
    rows.append(_row("choice", dtype, 1, states, actions, seconds, prompt_tokens))
    return rows


def _row(method, dtype, parallel, states, actions, seconds, prompt_tokens) -> dict:
    valid = sum(a is not None and a in s.admissible for s, a in zip(states, actions))
    solver = sum(a == s.solver_action for s, a in zip(states, actions))
    return {
        "method": method,
        "dtype": dtype,
        "parallel": parallel,
        "decisions": len(states),
        "ms_per_decision": 1000 * seconds / len(states),
        "decisions_per_s": len(states) / seconds if seconds > 0 else float("inf"),
        "valid": valid,
        "solver_agreement": solver,
        "prompt_tokens": round(prompt_tokens),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="keyroom/key")
    ap.add_argument("--states", type=int, default=8, help="seeds 0..N-1, first state of each")
    ap.add_argument("--parallel", default="1,8")
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--home", default=os.environ.get("CRL_HOME", ".crl"), help="where the model cache lives")
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--repeat-cache", action="store_true", help="score with the prompt cache repeated per candidate (the old pass)"
    )
    args = ap.parse_args()

    parallel = [int(x) for x in args.parallel.split(",")]
    rows, chance = [], 0.0
    for dtype in args.dtypes.split(","):
        model = LocalChatModel.embedded(Path(args.home) / "models", device="cpu", dtype=dtype)
        try:
            states = task_states(model, args.task, list(range(args.states)))
            chance = sum(1 / len(s.admissible) for s in states)
            rows += measure(model, states, parallel, dtype, packed=not args.repeat_cache)
        finally:
            model.close()
    if args.json:
        print(json.dumps({"random_agreement": chance, "rows": rows}, indent=2))
        return
    print(f"{args.task}: first state of seeds 0..{args.states - 1}, embedded SmolLM2-135M, CPU")
    print(f"a uniformly random admissible action would agree with the reference on {chance:.1f} of {args.states}")
    header = f"{'method':<9} {'dtype':<5} {'par':>3} {'ms/decision':>11} {'decisions/s':>11} {'valid':>7} {'= ref':>8}"
    print(f"{header} {'prompt tok':>10}")
    for r in rows:
        n = r["decisions"]
        print(
            f"{r['method']:<9} {r['dtype']:<5} {r['parallel']:>3} {r['ms_per_decision']:>11.0f} "
            f"{r['decisions_per_s']:>11.2f} {r['valid']:>3}/{n:<3} {r['solver_agreement']:>4}/{n:<3} "
            f"{r['prompt_tokens']:>10}"
        )


if __name__ == "__main__":
    main()
