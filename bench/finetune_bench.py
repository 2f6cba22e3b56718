"""LoRA fine-tuning on CPU (a benchmark, not a test): training speed, and an expert-iteration loop.

Speed: fills a scratch bank with solver demonstrations (scripted, no model needed), builds
an SFT dataset with the embedded model's tokenizer, trains a few steps per setting (and,
with --full, one whole epoch) and scores each adapter on held-out examples.

    python -m bench.finetune_bench [--examples 300] [--steps 12] [--settings fp32,bf16-autocast,fp32+ckpt] [--heldout 16] [--full]

Peak RSS is the process's: for memory figures, one setting and one batch layout per invocation
(`--settings bf16-autocast --batch-size 1 --accumulation 8`), optionally on an existing SFT dataset
(`--dataset DIR`).

Expert iteration (--expert-iteration): the embedded model collects train-fold episodes with
memory on (--policy posterior, the default, or the older mixed), an SFT round trains on the successes, then a DPO round on top of
the promoted adapter; dev-fold success with and without memory is reported before and after
each round, with 95% intervals, and each round passes through the real promotion gate
(judged on the no-memory evaluations, so a round worse than the last is not promoted).

    python -m bench.finetune_bench --expert-iteration --task keyroom/key --collect 64 --eval 40 --workdir DIR

A curriculum (the seed's sub-skills, then the compound task): collect on the sub-skills,
twice per seed (the second pass sampled, for DPO pairs), evaluate on the compound task:

    python -m bench.finetune_bench --expert-iteration --task keyroom/compound \
        --collect-tasks keyroom/key,keyroom/door,keyroom/chest,keyroom/compound --collect-passes 2 ...

More rounds (--sft-rounds N): each round after the first collects on new train seeds with the
promoted adapter (memory on) and trains SFT from the base on every success so far; the DPO round
comes last, on top of whatever is promoted then. Every evaluation records per-seed outcomes; at the
end each adapter's three arms (alone, base + memory on the same bank, adapter + memory) are
compared with paired tests (`bench.complementarity`). Every finished stage is appended to
<workdir>/expert-iteration.jsonl; rerunning the same command resumes after the last one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

from crl.agent.app import start_run  # noqa: E402
from crl.agent.config import load_settings  # noqa: E402
from crl.agent.llm.embedded import EMBEDDED_MODEL_NAME, embedded_model_path  # noqa: E402
from crl.agent.llm.scripted import ScriptedModel  # noqa: E402
from crl.finetune.build import build_dataset  # noqa: E402
from crl.finetune.config import FinetuneConfig  # noqa: E402
from crl.finetune.tokens import load_tokenizer  # noqa: E402
from crl.finetune.train import TrainJob, run_training  # noqa: E402
from crl.memory.bank import ExperienceBank  # noqa: E402
from crl.memory.storage.embeddings import HashingEmbedding  # noqa: E402
from crl.tasks.keyroom import solve  # noqa: E402
from crl.tasks.registry import fold_seeds  # noqa: E402


def solver_demonstrations(home: Path, task: str, episodes: int, seed_start: int = 0) -> None:
    """Log `episodes` solver-played episodes of a keyroom task as one run (the agent's prompts, real logs)."""
    variant = task.split("/", 1)[1]
    seeds = fold_seeds(task, "train", episodes, seed_start)
    model = ScriptedModel([" " + a for s in seeds for a in solve(s, variant)], name="scripted")
    settings = load_settings(
        {"home": str(home), "agent": {"reply_format": "action", "parallel": 1}, "memory": {"enabled": False}}
    )
    start_run(settings, task, episodes, seed_start=seed_start, model=model)


def sft_dataset(home: Path, examples: int, models_dir: Path, config: FinetuneConfig) -> Path:
    """An SFT dataset of about `examples` solver turns (keyroom/compound and keyroom/key)."""
    per_compound = 8  # solver turns per compound episode, after near-duplicates go
    solver_demonstrations(home, "keyroom/compound", max(1, examples // per_compound))
    solver_demonstrations(home, "keyroom/key", max(1, examples // 10))
    bank = ExperienceBank(home / "memory", runs_dir=home / "runs", embedder=HashingEmbedding(64))
    try:
        bank.sync()
        out = home / "datasets" / "bench-sft"
        card = build_dataset(
            "sft",
            bank,
            config,
            out,
            tokenizer=load_tokenizer(embedded_model_path(models_dir)),
            base_model=EMBEDDED_MODEL_NAME,
        )
    finally:
        bank.close()
    print(f"dataset: {card.examples} examples, tokens {card.tokens}, max_length {card.max_length}", flush=True)
    return out


def _trim(dataset: Path, examples: int, home: Path) -> Path:
    """A copy of the dataset with its first `examples` rows (card hash updated)."""
    from crl.finetune.dataset_card import CARD_FILE, DATA_FILE, file_sha256, read_card

    out = home / "datasets" / f"bench-sft-{examples}"
    if out.exists():
        return out
    out.mkdir(parents=True)
    lines = (dataset / DATA_FILE).read_text().splitlines(keepends=True)[:examples]
    (out / DATA_FILE).write_text("".join(lines))
    card = read_card(dataset).model_copy(update={"examples": len(lines), "sha256": file_sha256(out / DATA_FILE)})
    (out / CARD_FILE).write_text(card.model_dump_json(indent=2))
    return out


def train_once(dataset: Path, base: Path, config: FinetuneConfig, work: Path, progress: bool) -> dict:
    import resource

    shutil.rmtree(work, ignore_errors=True)
    job = TrainJob(work.name, "sft", str(dataset), EMBEDDED_MODEL_NAME, str(base), config.model_dump())
    t = time.perf_counter()
    result = run_training(job, work, progress=progress)
    total = time.perf_counter() - t
    m = result.metrics
    return {
        "steps": m["steps"],
        "examples_seen": m["examples_seen"],
        "train_seconds": round(m["wall_seconds"], 1),
        "round_seconds": round(total, 1),
        "examples_per_s": round(m["examples_per_s"], 3),
        "first_loss": m["first_loss"],
        "last_loss": m["last_loss"],
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
    }


def heldout_loss(adapter_dir: Path, base: Path, rows: list[dict]) -> float:
    """Mean loss per reply token on rows not trained on, in fp32 without autocast (judges learning, not speed)."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from crl.finetune.tokens import load_tokenizer

    tok = load_tokenizer(base)
    model = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32), str(adapter_dir)
    )
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for row in rows:
            prompt = tok.apply_chat_template(
                row["prompt"], add_generation_prompt=True, tokenize=True, return_dict=True
            )["input_ids"]
            full = tok.apply_chat_template(row["prompt"] + row["completion"], tokenize=True, return_dict=True)[
                "input_ids"
            ]
            ids = torch.tensor([full])
            logps = torch.log_softmax(model(ids).logits[0, :-1].float(), dim=-1)
            picked = logps[torch.arange(len(full) - 1), ids[0, 1:]][len(prompt) - 1 :]
            total -= float(picked.sum())
            count += len(picked)
    return total / count


def _eval(
    settings_home: Path,
    task: str,
    episodes: int,
    adapter: Path | None,
    memory: bool,
    models_dir: Path,
    policy: str = "mixed",
    max_steps: int | None = None,
) -> dict:
    """Dev-fold success of the embedded model plus `adapter`, with or without memory (the gate's
    evaluation), with per-seed outcomes for paired tests and the per-decision figures."""
    from crl.agent.finetuning import evaluate_adapter

    agent = {"parallel": 8, "policy": policy} | ({"max_steps": max_steps} if max_steps else {})
    settings = load_settings({"home": str(settings_home), "agent": agent, "llm": {"dtype": "bf16"}})
    result = evaluate_adapter(settings, task, episodes, adapter, memory, base=str(embedded_model_path(models_dir)))
    report = result.report()
    stats = result.stats
    overrides = ("scored_steps", "memory_overrides", "override_rate", "override_win_rate")
    return {
        "success": report["success_rate"],
        "successes": report["successes"],
        "ci95": [round(x, 3) for x in report["ci95"]],
        "episodes": report["episodes"],
        "outcomes": {str(e.seed): e.success for e in result.episodes if e.finished},
        "invalid_rate": round(report["invalid_action_rate"], 4),
        "decided_by": report["decided_by"],
        "ms_per_decision": round(1000 * (stats.model_seconds + stats.retrieval_seconds) / max(1, stats.steps), 1),
        "wall_seconds": round(stats.wall_seconds, 1),
    } | {k: report[k] for k in overrides if k in report}


def _gate(home: Path, config: FinetuneConfig, adapter_id: str, task: str, scores: dict[Path | None, dict]):
    """The real promotion gate (`finetune.gate.run_gate`), fed the dev evaluations already played
    without memory (the same seeds for every adapter), so the decision costs no extra episodes."""
    from crl.finetune.gate import TaskScore, run_gate
    from crl.finetune.registry import AdapterRegistry

    def evaluator(adapter: Path | None, tasks, episodes):
        result = scores[Path(adapter) if adapter else None]
        outcomes = {int(seed): won for seed, won in result.get("outcomes", {}).items()}
        return [TaskScore(task, result["successes"], result["episodes"], outcomes=outcomes)]

    return run_gate(
        AdapterRegistry.of(home), adapter_id, evaluator, config.model_copy(update={"gate_tasks": [task]}), actor="bench"
    )


def expert_iteration(args, models_dir: Path) -> list[dict]:
    """Rounds of (collect with memory -> SFT on the successes -> evaluate -> gate), then DPO on top -> evaluate -> gate.

    Round 1 collects with the base model; each later round collects on new train seeds with the
    promoted adapter, and its SFT round trains from the base on every success so far (as
    `crl finetune auto` does). Each finished stage is appended to `<workdir>/expert-iteration.jsonl`;
    a rerun with the same workdir reuses the stages already there (a killed stage is played again).
    """
    from bench.stage_log import StageLog
    from crl.agent.app import open_bank
    from crl.agent.llm.local import LocalChatModel
    from crl.finetune.registry import AdapterRegistry
    from crl.finetune.rounds import FinetuneContext, train_and_register

    home = Path(args.workdir) / ".crl"
    base = embedded_model_path(models_dir)
    agent = {"parallel": 8, "policy": args.policy} | ({"max_steps": args.max_steps} if args.max_steps else {})
    settings = load_settings({"home": str(home), "agent": agent, "llm": {"dtype": "bf16"}})
    posterior = settings.agent.posterior.model_copy(update={"mode": "sample"})
    sampling = settings.model_copy(
        update={
            "llm": settings.llm.model_copy(update={"temperature": args.collect_temperature}),
            "agent": settings.agent.model_copy(update={"posterior": posterior}),
        }
    )
    collect_tasks = [t.strip() for t in (args.collect_tasks or args.task).split(",") if t.strip()]
    config = FinetuneConfig(epochs=args.epochs, max_length=args.max_length, memory_prompts=args.memory_prompts)
    dpo_lr = {} if args.dpo_learning_rate is None else {"learning_rate": args.dpo_learning_rate}
    if dpo_lr:
        config = config.model_copy(update={"dpo_learning_rate": args.dpo_learning_rate})
    tokenizer = load_tokenizer(base)
    registry = AdapterRegistry.of(home)
    log = StageLog(Path(args.workdir) / "expert-iteration.jsonl")
    plain: dict[Path | None, dict] = {}
    ours = {row.get("adapter") for row in log.recorded() if row["stage"].endswith(" train")}
    outside = registry.promoted(EMBEDDED_MODEL_NAME)
    if outside and outside not in ours:
        raise SystemExit(
            f"{home} has adapter {outside} promoted by something other than this benchmark; the loop starts "
            "from the base model: roll it back (crl adapters rollback) or use another --workdir"
        )

    def folder_of(adapter_id: str | None) -> Path | None:
        return registry.adapter_dir(adapter_id) if adapter_id else None

    def evaluate(name: str, adapter_id: str | None, memory: bool, policy: str = args.policy, aligned: int = 0) -> None:
        episodes = args.eval_memory if memory else args.eval
        if not episodes:
            return
        folder = folder_of(adapter_id)
        row = log.run(
            f"eval {name} memory={memory}",
            lambda: _eval(home, args.task, episodes, folder, memory, models_dir, policy, settings.agent.max_steps),
            task=args.task,
            max_steps=settings.agent.max_steps,
            adapter=adapter_id,
            dev_episodes=episodes,
            policy=policy,
            **({"aligned": aligned} if aligned else {}),
        )
        if name == "random":
            return
        if not memory:
            plain[folder] = row

    def collect(round_no: int, adapter_id: str | None) -> None:
        seed_start = (round_no - 1) * args.collect
        model = None
        try:
            for task in collect_tasks:
                for n in range(args.collect_passes):

                    def play(task: str = task, n: int = n) -> dict:
                        nonlocal model
                        if model is None:
                            model = LocalChatModel(base, adapter=folder_of(adapter_id), dtype="bf16")
                        t = time.perf_counter()
                        result = start_run(
                            settings if n == 0 else sampling, task, args.collect, seed_start=seed_start, model=model
                        )
                        s = result.summary
                        return {
                            "run_id": result.info.run_id,
                            "success": s.success_rate,
                            "successes": s.successes,
                            "episodes": s.finished,
                            "wall_seconds": round(time.perf_counter() - t, 1),
                        }

                    decoding = "greedy" if n == 0 else f"temperature {args.collect_temperature}"
                    log.run(
                        f"collect {round_no} {task} pass {n + 1}",
                        play,
                        adapter=adapter_id,
                        memory=True,
                        policy=args.policy,
                        fold="train",
                        seeds=[seed_start, seed_start + args.collect],
                        decoding=decoding,
                    )
        finally:
            if model is not None:
                model.close()

    def align(name: str, adapter_id: str, round_no: int) -> int:
        """The new adapter plays `--align` train episodes with memory, stored, before it is judged with
        memory: memory's values then hold its own experience, not only that of the actors before it."""
        if not args.align:
            return 0
        seed_start = max(args.sft_rounds, 3) * args.collect + (round_no - 1) * args.align

        def play() -> dict:
            from crl.agent.finetuning import play_with_adapter

            t = time.perf_counter()
            folder = folder_of(adapter_id)
            result = play_with_adapter(settings, args.task, args.align, folder, base=str(base), seed_start=seed_start)
            s = result.summary
            return {
                "run_id": result.info.run_id,
                "successes": s.successes,
                "episodes": s.finished,
                "env_steps": s.steps,
                "wall_seconds": round(time.perf_counter() - t, 1),
            }

        log.run(f"align {name}", play, adapter=adapter_id, fold="train", seeds=[seed_start, seed_start + args.align])
        return args.align

    def train(kind: str, name: str, parent: str | None, round_no: int) -> str | None:
        """Build, train, evaluate and gate one round; the adapter's id if the gate promoted it."""
        folder = home / "datasets" / (name.replace(" ", "-") + (f"-on-{parent}" if parent else ""))

        def build() -> dict:
            shutil.rmtree(folder, ignore_errors=True)
            with open_bank(settings, actor="bench") as bank:
                card = build_dataset(
                    kind, bank, config, folder, tasks=collect_tasks, tokenizer=tokenizer, base_model=EMBEDDED_MODEL_NAME
                )
            return {"examples": card.examples, "dropped": card.dropped, "stats": card.stats}

        def fit() -> dict:
            step_cap = args.dpo_steps if kind == "dpo" else -1
            ctx = FinetuneContext(
                home=home,
                config=config.model_copy(update={"max_steps": step_cap}),
                base_model=EMBEDDED_MODEL_NAME,
                base_model_path=base,
                progress=False,
            )
            _, lineage = train_and_register(ctx, kind, folder, from_adapter=parent)
            m = lineage.metrics
            return {
                "adapter": lineage.id,
                "steps": m["steps"],
                "examples_seen": m.get("examples_seen"),
                "wall_seconds": round(m["wall_seconds"], 1),
                "examples_per_s": round(m["examples_per_s"], 3),
                "first_loss": m["first_loss"],
                "last_loss": m["last_loss"],
            }

        data = {"memory_prompts": args.memory_prompts, "max_length": args.max_length}
        try:
            log.run(f"{name} dataset", build, **data)
        except ValueError as exc:
            log.skip(f"{name} dataset", error=str(exc))
            return None
        lr = dpo_lr if kind == "dpo" else {}
        adapter_id = log.run(f"{name} train", fit, parent=parent, **data, **lr)["adapter"]
        evaluate(name, adapter_id, memory=False)
        evaluate(name, adapter_id, memory=True, aligned=align(name, adapter_id, round_no))

        def gate() -> dict:
            decision = _gate(home, config, adapter_id, args.task, plain)
            return {"promoted": decision.promoted, "reason": decision.reason, "current": decision.current}

        return adapter_id if log.run(f"gate {name}", gate, candidate=adapter_id)["promoted"] else None

    if args.eval_random:
        evaluate("random", None, memory=False, policy="random")
    evaluate("base", None, memory=False)
    promoted = None
    for round_no in range(1, args.sft_rounds + 1):
        collect(round_no, promoted)
        evaluate("base" if round_no == 1 else f"base round {round_no}", None, memory=True)
        promoted = train("sft", f"sft {round_no}", parent=None, round_no=round_no) or promoted
    if args.dpo_steps and promoted:
        train("dpo", "dpo", parent=promoted, round_no=args.sft_rounds + 1)
    return log.rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=300)
    ap.add_argument("--steps", type=int, default=12, help="optimizer steps per setting for the speed comparison")
    ap.add_argument("--batch-size", type=int, default=8, help="examples per micro-step")
    ap.add_argument("--accumulation", type=int, default=1, help="micro-steps per optimizer step")
    ap.add_argument(
        "--dataset",
        type=Path,
        help="train on this SFT dataset folder (e.g. one an experiment built) instead of solver demonstrations",
    )
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--settings", default="fp32,bf16-autocast,fp32+ckpt")
    ap.add_argument("--full", action="store_true", help="also train one full epoch over all examples (fastest setting)")
    ap.add_argument("--models-dir", default=os.environ.get("CRL_TEST_MODELS_DIR", ".crl/models"))
    ap.add_argument("--heldout", type=int, default=0, help="score each setting's adapter on this many unseen examples")
    ap.add_argument("--workdir", help="keep the scratch bank and dataset here (reused when present)")
    ap.add_argument("--expert-iteration", action="store_true", help="run the expert-iteration loop instead")
    ap.add_argument("--task", default="keyroom/key")
    ap.add_argument(
        "--collect", type=int, default=64, help="train-fold episodes collected with memory on, per task and pass"
    )
    ap.add_argument(
        "--collect-tasks",
        help="comma-separated tasks to collect on (default: --task); e.g. the sub-skills "
        "keyroom/key,keyroom/door,keyroom/chest for a compound evaluation",
    )
    ap.add_argument(
        "--collect-passes",
        type=int,
        default=1,
        help="play the same train seeds this many times; passes after the first sample (so one seed can "
        "give a success and a failure: trajectory-level DPO pairs)",
    )
    ap.add_argument(
        "--collect-temperature", type=float, default=0.7, help="sampling temperature of passes after the first"
    )
    ap.add_argument("--eval", type=int, default=40, help="dev-fold episodes per evaluation without memory")
    ap.add_argument(
        "--eval-memory", type=int, help="dev-fold episodes per evaluation with memory (default: --eval; 0: skip)"
    )
    ap.add_argument(
        "--policy",
        default="posterior",
        choices=["posterior", "mixed"],
        help="how collection and the memory evaluations act (posterior: scored actions; the no-memory "
        "evaluations then score too; mixed: the older thresholds, the model generating)",
    )
    ap.add_argument("--eval-random", action="store_true", help="also evaluate random admissible actions")
    ap.add_argument(
        "--max-steps",
        type=int,
        help="step limit per episode for collection and every evaluation (default: agent.max_steps, else the task's)",
    )
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument(
        "--max-length",
        type=int,
        default=768,
        help="tokens per SFT example; longer ones are dropped (with --memory-prompts keep, prompts carry the "
        "memory section: raise it to agent.max_prompt_tokens plus the reply)",
    )
    ap.add_argument(
        "--sft-rounds",
        type=int,
        default=1,
        help="expert-iteration rounds; each after the first collects new train seeds with the promoted adapter",
    )
    ap.add_argument(
        "--dpo-steps", type=int, default=10, help="optimizer steps of the DPO round on top (CPU time; 0: none)"
    )
    ap.add_argument(
        "--dpo-learning-rate",
        type=float,
        help="peak learning rate of the DPO round (default: finetune.dpo_learning_rate, 2e-5); recorded with its stage",
    )
    ap.add_argument(
        "--memory-prompts",
        default="strip",
        choices=["keep", "strip", "skip"],
        help="train on prompts with their memory section (keep) or without it (strip: the adapter "
        "internalises what memory taught, and is judged without memory)",
    )
    ap.add_argument(
        "--align",
        type=int,
        default=0,
        help="train episodes each new adapter plays with memory (stored) before its evaluation with memory, "
        "so memory holds the new actor's own experience (0: none)",
    )
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    models_dir = Path(args.models_dir)
    if args.eval_memory is None:
        args.eval_memory = args.eval
    if args.expert_iteration:
        if not args.workdir:
            raise SystemExit("--expert-iteration needs --workdir (its bank, runs and adapters stay there)")
        if args.eval < 1:
            raise SystemExit("--expert-iteration needs --eval >= 1: the gate judges rounds on those evaluations")
        rows = expert_iteration(args, models_dir)
        from bench.complementarity import compare, eval_rows

        comparisons = compare(eval_rows(Path(args.workdir) / "expert-iteration.jsonl"))
        if args.json:
            print(json.dumps({"stages": rows, "complementarity": comparisons}, indent=2))
        else:
            for c in comparisons:
                print(json.dumps({"complementarity": c}), flush=True)
        return
    base = embedded_model_path(models_dir)
    config = FinetuneConfig(
        batch_size=args.batch_size,
        gradient_accumulation=args.accumulation,
        lora_rank=args.rank,
        lora_alpha=2 * args.rank,
        logging_steps=1,
        save_steps=10_000,
    )
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(args.workdir or scratch)
        built = args.dataset or home / "datasets" / "bench-sft"
        if not (built / "card.json").is_file():
            if args.dataset:
                raise SystemExit(f"{args.dataset} is not a dataset folder (it has no card.json)")
            shutil.rmtree(home, ignore_errors=True)
            sft_dataset(home, args.examples, models_dir, config)
        dataset = args.dataset or _trim(built, args.examples, home)
        all_rows = [json.loads(line) for line in (built / "data.jsonl").read_text().splitlines()]
        heldout = all_rows[-args.heldout :] if args.heldout else []
        if args.heldout and len(all_rows) - args.heldout < args.steps * args.batch_size * args.accumulation:
            raise SystemExit("not enough examples to hold some out; lower --heldout or --steps")
        for setting in args.settings.split(","):
            precision, _, ckpt = setting.partition("+")
            cfg = config.model_copy(
                update={"cpu_precision": precision, "gradient_checkpointing": ckpt == "ckpt", "max_steps": args.steps}
            )
            row = {"setting": setting} | train_once(dataset, base, cfg, home / f"work-{setting}", progress=False)
            if args.heldout:
                row["heldout_loss"] = round(heldout_loss(home / f"work-{setting}" / "adapter", base, heldout), 4)
            rows.append(row)
            print(json.dumps(row), flush=True)
        if args.full:
            fastest = max(rows, key=lambda r: r["examples_per_s"])["setting"]
            precision, _, ckpt = fastest.partition("+")
            cfg = config.model_copy(
                update={
                    "cpu_precision": precision,
                    "gradient_checkpointing": ckpt == "ckpt",
                    "epochs": 1.0,
                    "max_steps": -1,
                }
            )
            row = {"setting": f"{fastest} full epoch"} | train_once(
                dataset, base, cfg, home / "work-full", progress=True
            )
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
