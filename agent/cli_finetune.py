"""`crl dataset`, `crl finetune` and `crl adapters`: thin commands over `finetune/`.

Mounted by `agent.cli` as sub-apps. The agent side of fine-tuning lives here: which base
model the settings select and where its checkpoint is, how the bank is opened, and the
gate's evaluator, which plays dev-fold episodes with `agent.app.start_run`.

Under `accelerate launch` the same commands train on several processes (only the main one
writes the adapter and the registry):

    accelerate launch --num_processes 8 $(which crl) finetune sft --dataset DIR
    accelerate launch --cpu --num_processes 2 -m agent.cli_finetune finetune sft --dataset DIR
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Optional, Sequence

import typer
from rich.table import Table

from agent.cli import JsonOpt, _overrides, _settings, err, friendly_errors, main, out
from agent.config import Settings
from finetune.config import FinetuneConfig
from finetune.gate import Evaluator, TaskScore
from finetune.registry import AdapterRegistry, base_model_key, serve_args
from finetune.rounds import FinetuneContext

dataset_app = typer.Typer(help="Build and inspect SFT/DPO datasets from the experience bank.", no_args_is_help=True)
finetune_app = typer.Typer(help="Train LoRA adapters on datasets (SFT, DPO) and run scheduled rounds.", no_args_is_help=True)
adapters_app = typer.Typer(help="The adapter registry: lineage, gated promotion, rollback.", no_args_is_help=True)


# ---- the agent side of a round --------------------------------------------------------------


def finetune_config(settings: Settings, **flags: Any) -> FinetuneConfig:
    """`settings.finetune` (defaults until the settings carry it) with CLI flags applied (None = not given)."""
    base = getattr(settings, "finetune", None) or FinetuneConfig()
    given = {k: v for k, v in flags.items() if v is not None}
    return FinetuneConfig.model_validate(base.model_dump() | given)


def base_model_path(settings: Settings, base: str | None = None) -> Path | str:
    """The checkpoint the base model loads from: the embedded one (converted once) or `llm.model` / `base`."""
    model = base or settings.llm.model
    if model is None:
        from agent.llm.embedded import embedded_model_path

        return embedded_model_path(settings.models_dir)
    from agent.llm.local import _resolve_source

    source, _ = _resolve_source(model, settings.models_dir)
    return source


def local_evaluator(settings: Settings, base: str | None = None, memory: bool | None = None) -> Evaluator:
    """The gate's evaluator: dev-fold episodes with the local base model plus an adapter (or none).

    Args:
        memory: keep memory in the loop as configured; False evaluates the model alone
            (default: `finetune.gate_memory`).
    """
    if memory is None:
        memory = finetune_config(settings).gate_memory

    def evaluate(adapter: Path | None, tasks: Sequence[str], episodes: int) -> list[TaskScore]:
        from agent.app import start_run
        from agent.llm.local import LocalChatModel

        llm = settings.llm.model_copy(update={"adapter": str(adapter) if adapter else None})
        run_settings = settings.model_copy(update={"llm": llm})
        if not memory:
            agent = settings.agent.model_copy(update={"memory": "off", "policy": "llm"})
            run_settings = run_settings.model_copy(update={"agent": agent})
        model = LocalChatModel(
            base_model_path(settings, base), adapter=adapter, device=llm.device, dtype=llm.dtype,
            cache_dir=settings.models_dir,
        )
        scores = []
        try:
            for task in tasks:
                result = start_run(run_settings, task, episodes, fold="dev", kind="eval", model=model)
                s = result.summary
                scores.append(TaskScore(task, s.successes, s.finished, result.info.run_id))
        finally:
            model.close()
        return scores

    return evaluate


def finetune_context(
    settings: Settings, config: FinetuneConfig | None = None, base: str | None = None, gate: bool = True,
    progress: bool = True,
) -> FinetuneContext:
    """Everything a round needs, from the settings (what `crl run --finetune-auto` would pass too)."""
    from agent.app import open_bank

    config = config or finetune_config(settings)
    return FinetuneContext(
        home=Path(settings.home),
        config=config,
        base_model=base_model_key(base or settings.llm.model),
        base_model_path=Path(base_model_path(settings, base)),
        open_bank=lambda: open_bank(settings, actor="finetune"),
        evaluator=local_evaluator(settings, base, memory=config.gate_memory) if gate else None,
        progress=progress,
    )


# ---- crl dataset ----------------------------------------------------------------------------


@dataset_app.command("build")
@friendly_errors
def dataset_build(
    kind: str = typer.Argument(..., help="sft or dpo."),
    family: Optional[str] = typer.Option(None, "--family", help="Task family to draw from (default: all)."),
    task: Optional[list[str]] = typer.Option(None, "--task", help="Only these tasks (repeatable)."),
    min_value: Optional[float] = typer.Option(None, "--min-value", help="Leave out episodes valued below this."),
    max_length: Optional[int] = typer.Option(None, "--max-length", help="Drop examples longer than this (tokens)."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Output folder (default <home>/datasets/<name>)."),
    base: Optional[str] = typer.Option(None, "--base", help="Base model whose tokenizer checks the examples."),
    as_json: bool = JsonOpt,
) -> None:
    """Build an SFT or DPO dataset (JSONL + dataset card) from the experience bank."""
    from finetune.dataset_card import read_card
    from finetune.rounds import make_dataset

    settings = _settings(_overrides())
    config = finetune_config(settings, min_value=min_value, max_length=max_length)
    ctx = finetune_context(settings, config, base=base, gate=False)
    path = make_dataset(ctx, kind, family=family, tasks=task, out_dir=out_dir)
    card = read_card(path)
    if as_json:
        out.print_json(card.model_dump_json(exclude={"source_episode_ids", "source_step_ids"}))
        return
    _print_card(card, path)


def _print_card(card, path: Path) -> None:
    table = Table(title=f"dataset {card.name}", show_header=False, title_justify="left")
    table.add_row("folder", str(path))
    table.add_row("kind", f"{card.kind} ({card.format})")
    table.add_row("examples", str(card.examples))
    table.add_row("tasks", ", ".join(card.tasks))
    table.add_row("source episodes", str(len(card.source_episode_ids)))
    table.add_row("left out", ", ".join(f"{k} {v}" for k, v in card.dropped.items()) or "-")
    if card.tokens:
        t = card.tokens
        table.add_row("tokens", f"prompt p50 {t['prompt_p50']}, total p95 {t['total_p95']}, max {t['total_max']}")
    table.add_row("max_length", str(card.max_length))
    table.add_row("sha256", card.sha256)
    out.print(table)


@dataset_app.command("show")
@friendly_errors
def dataset_show(
    name: str = typer.Argument(..., help="Dataset name (or unique prefix) or folder."),
    n: int = typer.Option(3, "-n", help="Examples to preview."),
    as_json: bool = JsonOpt,
) -> None:
    """The dataset card and the first examples."""
    from finetune.dataset_card import load_rows, read_card, resolve_dataset

    settings = _settings(_overrides())
    path = resolve_dataset(Path(settings.home) / "datasets", name)
    card = read_card(path)
    rows = load_rows(path)
    preview = [rows[i] for i in range(min(n, len(rows)))]
    if as_json:
        data = card.model_dump(exclude={"source_episode_ids", "source_step_ids"}) | {"preview": preview}
        out.print_json(json.dumps(data, default=str))
        return
    _print_card(card, path)
    for i, row in enumerate(preview):
        out.rule(f"example {i} · {row.get('task', '')} · {row.get('level', '')}".rstrip(" ·"))
        for m in row["prompt"]:
            out.print(f"[bold]{m['role']}[/]: {m['content']}", markup=True, highlight=False)
        for key in ("completion", "chosen", "rejected"):
            if key in row:
                out.print(f"[bold green]{key}[/]: {row[key][-1]['content']}", highlight=False)


@dataset_app.command("ls")
@friendly_errors
def dataset_ls(as_json: bool = JsonOpt) -> None:
    """Datasets under the data directory."""
    from finetune.dataset_card import list_datasets

    settings = _settings(_overrides())
    cards = list_datasets(Path(settings.home) / "datasets")
    rows = [{"name": c.name, "kind": c.kind, "examples": c.examples, "tasks": c.tasks, "sha256": c.sha256[:12]} for c in cards]
    if as_json:
        out.print_json(json.dumps(rows))
        return
    table = Table(title="datasets")
    for col in ("name", "kind", "examples", "tasks", "sha256"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["name"], r["kind"], str(r["examples"]), ", ".join(r["tasks"]), r["sha256"])
    out.print(table)


# ---- crl finetune ---------------------------------------------------------------------------


def _train(
    kind: str,
    dataset: Optional[str],
    family: Optional[str],
    base: Optional[str],
    from_adapter: Optional[str],
    resume: Optional[str],
    gate: bool,
    flags: dict[str, Any],
    as_json: bool,
) -> None:
    from finetune.dataset_card import resolve_dataset
    from finetune.guards import TrainingDiverged
    from finetune.rounds import gate_adapter, make_dataset, train_and_register

    settings = _settings(_overrides())
    config = finetune_config(settings, **flags)
    ctx = finetune_context(settings, config, base=base, gate=gate, progress=not as_json)
    dataset_dir = None
    if not resume:
        if dataset:
            dataset_dir = resolve_dataset(ctx.datasets_dir, dataset)
        else:
            dataset_dir = make_dataset(ctx, kind, family=family)
    if from_adapter is None and kind == "dpo" and not resume:
        from_adapter = ctx.registry.promoted(ctx.base_model)
    try:
        result, lineage = train_and_register(ctx, kind, dataset_dir, from_adapter=from_adapter, resume_job=resume)
    except TrainingDiverged as exc:
        err.print(f"[bold red]error:[/] {exc}")
        raise typer.Exit(1)
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]: continue from the last checkpoint with `crl finetune "
                  f"{kind} --resume JOB` (jobs are under {ctx.jobs_dir})")
        raise typer.Exit(130)
    if lineage is None:
        return
    report: dict[str, Any] = {"adapter": lineage.id, "dataset": lineage.dataset.name, "parent": lineage.parent,
                              "metrics": lineage.metrics}
    if gate:
        decision = gate_adapter(ctx, lineage.id)
        report["gate"] = decision.model_dump()
    if as_json:
        out.print_json(json.dumps(report, default=str))
        return
    m = lineage.metrics
    out.print(f"adapter [bold]{lineage.id}[/] trained on {lineage.dataset.name} ({lineage.dataset.examples} examples): "
              f"loss {m.get('first_loss')} -> {m.get('last_loss')}, {m['steps']} steps, "
              f"{m['wall_seconds']:.0f} s, {m['examples_per_s']:.2f} examples/s")
    if gate:
        g = report["gate"]
        verdict = "[green]promoted[/]" if g["promoted"] else "[red]not promoted[/]"
        out.print(f"gate: {verdict}: {g['reason']}")


def _train_flags(epochs, lr, rank, alpha, target_modules, max_length, max_steps, batch_size) -> dict[str, Any]:
    return {
        "epochs": epochs, "learning_rate": lr, "lora_rank": rank, "lora_alpha": alpha,
        "target_modules": target_modules.split(",") if target_modules else None,
        "max_length": max_length, "max_steps": max_steps, "batch_size": batch_size,
    }


DatasetOpt = typer.Option(None, "--dataset", help="Dataset name or folder (default: build one from the bank now).")
FamilyOpt = typer.Option(None, "--family", help="Task family of the dataset built when --dataset is not given.")
BaseOpt = typer.Option(None, "--base", help="Base model (default: llm.model, or the embedded SmolLM2-135M).")
FromAdapterOpt = typer.Option(None, "--from-adapter", help="Registered adapter to continue training from.")
ResumeOpt = typer.Option(None, "--resume", help="Continue an interrupted job from its last checkpoint.")
GateOpt = typer.Option(True, "--gate/--no-gate", help="Evaluate on dev seeds and promote if not worse.")
EpochsOpt = typer.Option(None, "--epochs")
LrOpt = typer.Option(None, "--lr", help="Peak learning rate.")
RankOpt = typer.Option(None, "--rank", help="LoRA rank.")
AlphaOpt = typer.Option(None, "--alpha", help="LoRA alpha.")
TargetsOpt = typer.Option(None, "--target-modules", help="Comma-separated module names, or all-linear.")
MaxLenOpt = typer.Option(None, "--max-length", help="Longest example in tokens.")
MaxStepsOpt = typer.Option(None, "--max-steps", help="Optimizer steps (overrides --epochs).")
BatchOpt = typer.Option(None, "--batch-size")


@finetune_app.command("sft")
@friendly_errors
def finetune_sft(
    dataset: Optional[str] = DatasetOpt, family: Optional[str] = FamilyOpt, base: Optional[str] = BaseOpt,
    from_adapter: Optional[str] = FromAdapterOpt, resume: Optional[str] = ResumeOpt, gate: bool = GateOpt,
    epochs: Optional[float] = EpochsOpt, lr: Optional[float] = LrOpt, rank: Optional[int] = RankOpt,
    alpha: Optional[int] = AlphaOpt, target_modules: Optional[str] = TargetsOpt,
    max_length: Optional[int] = MaxLenOpt, max_steps: Optional[int] = MaxStepsOpt,
    batch_size: Optional[int] = BatchOpt, as_json: bool = JsonOpt,
) -> None:
    """Train a LoRA adapter with SFT on successful trajectories, register it, gate it."""
    flags = _train_flags(epochs, lr, rank, alpha, target_modules, max_length, max_steps, batch_size)
    _train("sft", dataset, family, base, from_adapter, resume, gate, flags, as_json)


@finetune_app.command("dpo")
@friendly_errors
def finetune_dpo(
    dataset: Optional[str] = DatasetOpt, family: Optional[str] = FamilyOpt, base: Optional[str] = BaseOpt,
    from_adapter: Optional[str] = typer.Option(
        None, "--from-adapter", help="Adapter to continue from (default: the promoted one, if any)."
    ),
    resume: Optional[str] = ResumeOpt, gate: bool = GateOpt,
    epochs: Optional[float] = EpochsOpt, lr: Optional[float] = LrOpt, rank: Optional[int] = RankOpt,
    alpha: Optional[int] = AlphaOpt, target_modules: Optional[str] = TargetsOpt,
    max_length: Optional[int] = MaxLenOpt, max_steps: Optional[int] = MaxStepsOpt,
    batch_size: Optional[int] = BatchOpt, as_json: bool = JsonOpt,
) -> None:
    """Train with DPO on success/failure pairs (on top of the promoted adapter), register it, gate it."""
    flags = _train_flags(epochs, None, rank, alpha, target_modules, max_length, max_steps, batch_size)
    if lr is not None:
        flags["dpo_learning_rate"] = lr
    _train("dpo", dataset, family, base, from_adapter, resume, gate, flags, as_json)


@finetune_app.command("auto")
@friendly_errors
def finetune_auto(
    once: bool = typer.Option(False, "--once", help="Check once (and run a round if due), then exit."),
    min_new: Optional[int] = typer.Option(None, "--min-new", help="New qualifying episodes that start a round."),
    kind: Optional[str] = typer.Option(None, "--kind", help="sft, dpo or sft+dpo."),
    interval: Optional[float] = typer.Option(None, "--interval", help="Seconds between checks."),
    as_json: bool = JsonOpt,
) -> None:
    """Start a round (build -> train -> gate -> promote) whenever enough new experience has arrived."""
    from finetune.scheduler import maybe_run_round

    settings = _settings(_overrides())
    config = finetune_config(settings, auto_min_new_episodes=min_new, auto_kind=kind, auto_interval_s=interval)
    ctx = finetune_context(settings, config, progress=not as_json)
    while True:
        line = {"time": time.time()} | round_report(*maybe_run_round(ctx))
        if as_json:
            out.print_json(json.dumps(line, default=str))
        else:
            out.print(round_message(line))
        if once:
            return
        time.sleep(config.auto_interval_s)


def round_report(seen, record) -> dict[str, Any]:
    """What one scheduler check saw and, if it ran one, how the round ended (`maybe_run_round`'s result)."""
    line: dict[str, Any] = {"new_episodes": seen.new_episodes, "threshold": seen.threshold}
    if record is not None:
        line |= {"round": record.round, "status": record.status, "steps": record.steps, "error": record.error}
    return line


def round_message(line: dict[str, Any]) -> str:
    """`round_report` as one line for people."""
    if "round" not in line:
        return f"fine-tuning: {line['new_episodes']}/{line['threshold']} new qualifying episodes; no round yet"
    error = f" - {line['error']}" if line["error"] else ""
    return f"fine-tuning round {line['round']}: [bold]{line['status']}[/] ({line['new_episodes']} new episodes){error}"


@finetune_app.command("rounds")
@friendly_errors
def finetune_rounds(as_json: bool = JsonOpt) -> None:
    """Every scheduled round with its outcome."""
    from dataclasses import asdict

    from finetune.scheduler import read_rounds

    rounds = read_rounds(_settings(_overrides()).home)
    if as_json:
        out.print_json(json.dumps([asdict(r) for r in rounds], default=str))
        return
    table = Table(title="fine-tuning rounds")
    for col in ("round", "started", "status", "new episodes", "adapters", "error"):
        table.add_column(col)
    for r in rounds:
        adapters = ", ".join(s.get("adapter") or "-" for s in r.steps if "kind" in s)
        table.add_row(str(r.round), time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started_at)), r.status,
                      str(r.trigger.get("new_episodes")), adapters, r.error or "")
    out.print(table)


# ---- crl adapters ---------------------------------------------------------------------------


def _registry() -> tuple[Settings, AdapterRegistry]:
    settings = _settings(_overrides())
    return settings, AdapterRegistry.of(settings)


def _quarantined(settings: Settings) -> set[str] | None:
    """Record ids now quarantined, or None when the bank cannot be read (it is busy)."""
    from agent.app import open_bank
    from finetune.source import quarantined_ids

    try:
        with open_bank(settings, actor="adapters") as bank:
            return quarantined_ids(bank)
    except Exception as exc:  # listing adapters must work while a run owns the bank
        err.print(f"[yellow]warning:[/] cannot check quarantined memories ({exc})")
        return None


@adapters_app.command("ls")
@friendly_errors
def adapters_ls(as_json: bool = JsonOpt) -> None:
    """Adapters with lineage; promoted ones marked, and those trained on since-quarantined memories flagged."""
    settings, registry = _registry()
    quarantined = _quarantined(settings)
    rows = []
    for a in registry.ls():
        card = registry.card(a.id)
        tainted = sorted(set(card.source_episode_ids + card.source_step_ids) & quarantined) if quarantined else []
        last_gate = a.gate[-1] if a.gate else None
        rows.append({
            "id": a.id, "kind": a.kind, "base_model": a.base_model, "parent": a.parent,
            "dataset": a.dataset.name, "examples": a.dataset.examples,
            "promoted": registry.promoted(a.base_model) == a.id,
            "gate": None if last_gate is None else {"promoted": last_gate.promoted, "candidate_rate": last_gate.candidate_rate,
                                                    "current_rate": last_gate.current_rate},
            "quarantined_sources": tainted,
        })
    if as_json:
        out.print_json(json.dumps(rows))
        return
    table = Table(title=f"adapters in {registry.root}")
    for col in ("id", "kind", "parent", "dataset", "gate", "", "flags"):
        table.add_column(col)
    for r in rows:
        g = r["gate"]
        gate = "-" if g is None else f"{g['candidate_rate']:.0%} vs {g['current_rate']:.0%}"
        flags = f"[magenta]{len(r['quarantined_sources'])} quarantined source(s)[/]" if r["quarantined_sources"] else ""
        table.add_row(r["id"], r["kind"], r["parent"] or "-", f"{r['dataset']} ({r['examples']})", gate,
                      "[bold green]promoted[/]" if r["promoted"] else "", flags)
    out.print(table)


@adapters_app.command("show")
@friendly_errors
def adapters_show(adapter: str = typer.Argument(..., help="Adapter id or unique prefix."), as_json: bool = JsonOpt) -> None:
    """An adapter's full lineage: base model, dataset, parent, config, metrics, gate decisions."""
    _, registry = _registry()
    lineage = registry.get(adapter)
    data = lineage.model_dump() | {"path": str(registry.adapter_dir(lineage.id)),
                                   "promoted": registry.promoted(lineage.base_model) == lineage.id}
    if as_json:
        out.print_json(json.dumps(data, default=str))
        return
    table = Table(title=f"adapter {lineage.id}", show_header=False, title_justify="left")
    for key in ("kind", "base_model", "parent", "path", "promoted"):
        table.add_row(key, str(data[key]))
    table.add_row("dataset", f"{lineage.dataset.name} ({lineage.dataset.examples} examples, sha256 {lineage.dataset.sha256[:12]})")
    table.add_row("created", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(lineage.created_at)))
    m = lineage.metrics
    table.add_row("metrics", f"loss {m.get('first_loss')} -> {m.get('last_loss')}, {m.get('steps')} steps, "
                             f"{m.get('examples_per_s') or 0:.2f} examples/s")
    table.add_row("lora", f"r={lineage.config.get('lora_rank')} alpha={lineage.config.get('lora_alpha')} "
                          f"{','.join(lineage.config.get('target_modules', []))}")
    for g in lineage.gate:
        table.add_row("gate", f"{'promoted' if g.promoted else 'refused'}: {g.reason}")
    out.print(table)


@adapters_app.command("promote")
@friendly_errors
def adapters_promote(
    adapter: str = typer.Argument(..., help="Adapter id or unique prefix."),
    force: bool = typer.Option(False, "--force", help="Promote without the evaluation gate (recorded as manual)."),
    as_json: bool = JsonOpt,
) -> None:
    """Promote an adapter if it passes the gate (dev seeds, not worse than the current one)."""
    from finetune.gate import run_gate

    settings, registry = _registry()
    lineage = registry.get(adapter)
    if force:
        entry = registry.promote(lineage.id, reason="manual (--force, no gate)", actor="user")
        result: dict[str, Any] = {"promoted": True, "reason": entry.reason, "previous": entry.previous}
    else:
        config = finetune_config(settings)
        decision = run_gate(registry, lineage.id, local_evaluator(settings, memory=config.gate_memory), config)
        result = decision.model_dump()
    if as_json:
        out.print_json(json.dumps(result, default=str))
    else:
        verdict = "[green]promoted[/]" if result["promoted"] else "[red]not promoted[/]"
        out.print(f"{lineage.id}: {verdict} ({result['reason']})")


@adapters_app.command("rollback")
@friendly_errors
def adapters_rollback(
    base: Optional[str] = BaseOpt, as_json: bool = JsonOpt,
) -> None:
    """Restore the adapter promoted before the current one (or no adapter)."""
    settings, registry = _registry()
    entry = registry.rollback(base_model_key(base or settings.llm.model), reason="rollback", actor="user")
    if as_json:
        out.print_json(entry.model_dump_json())
    else:
        out.print(f"rolled back {entry.previous}; promoted now: {entry.adapter or 'none (base model)'}")


@adapters_app.command("rm")
@friendly_errors
def adapters_rm(adapter: str = typer.Argument(..., help="Adapter id or unique prefix.")) -> None:
    """Delete an adapter that is neither promoted nor restorable by a rollback."""
    _, registry = _registry()
    out.print(f"removed {registry.rm(adapter)}")


@adapters_app.command("serve-args")
@friendly_errors
def adapters_serve_args(
    adapters: Optional[list[str]] = typer.Argument(None, help="Adapters to serve (default: the promoted one)."),
    base: Optional[str] = BaseOpt,
) -> None:
    """vLLM arguments that serve adapters by name (`vllm serve BASE $(crl adapters serve-args)`)."""
    settings, registry = _registry()
    ids = [registry.resolve(a) for a in adapters] if adapters else None
    args = serve_args(registry, base_model_key(base or settings.llm.model), ids)
    typer.echo(" ".join(_quote(a) for a in args))


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


# ---- standalone entry point (for `accelerate launch -m agent.cli_finetune ...`) --------------

standalone = typer.Typer(no_args_is_help=True, pretty_exceptions_show_locals=False)
standalone.callback()(main)
standalone.add_typer(dataset_app, name="dataset")
standalone.add_typer(finetune_app, name="finetune")
standalone.add_typer(adapters_app, name="adapters")

if __name__ == "__main__":  # pragma: no cover
    standalone()
