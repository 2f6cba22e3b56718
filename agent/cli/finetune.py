"""`crl dataset`, `crl finetune` and `crl adapters`: thin commands over `finetune/`.

The wiring a round needs from the settings (base model, bank, the gate's evaluator) is
`crl.agent.finetuning`'s. Under `accelerate launch` the same commands train on several
processes (only the main one writes the adapter and the registry):

    accelerate launch --num_processes 8 $(which crl) finetune sft --dataset DIR
    accelerate launch --cpu --num_processes 2 -m crl.agent.cli.finetune finetune sft --dataset DIR
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from crl.agent.cli.common import (
    Col,
    DatasetKind,
    JsonOpt,
    RoundKind,
    command,
    effective_settings,
    emit,
    err,
    fitted_table,
    global_options,
    out,
    pairs_table,
    value,
)

dataset_app = typer.Typer(help="Build and inspect SFT/DPO datasets from the experience bank.", no_args_is_help=True)
finetune_app = typer.Typer(
    help="Train LoRA adapters on datasets (SFT, DPO) and run scheduled rounds.", no_args_is_help=True
)
adapters_app = typer.Typer(help="The adapter registry: lineage, gated promotion, rollback.", no_args_is_help=True)


# ---- crl dataset ----------------------------------------------------------------------------

CARD_ID_LISTS = {"source_episode_ids", "source_step_ids", "prompt_memory_ids"}  # long: in card.json, not in --json


def card_view(card, path: Path) -> Table:
    """A dataset card for people."""
    rows: dict[str, Any] = {
        "folder": path,
        "kind": f"{card.kind} ({card.format})",
        "examples": card.examples,
        "tasks": ", ".join(card.tasks),
        "source episodes": len(card.source_episode_ids),
        "left out": ", ".join(f"{k} {v}" for k, v in card.dropped.items()) or "-",
    }
    if card.tokens:
        t = card.tokens
        rows["tokens"] = f"prompt p50 {t['prompt_p50']}, total p95 {t['total_p95']}, max {t['total_max']}"
    rows |= {"max_length": card.max_length, "sha256": card.sha256}
    return pairs_table(rows, f"dataset {card.name}")


@command(dataset_app, "build")
def dataset_build(
    kind: DatasetKind = typer.Argument(..., help="What to build: SFT rows or DPO pairs."),
    family: str | None = typer.Option(None, "--family", help="Task family to draw from (default: all)."),
    task: list[str] | None = typer.Option(None, "--task", help="Only these tasks (repeatable)."),
    min_value: float | None = typer.Option(None, "--min-value", help="Leave out episodes valued below this."),
    max_length: int | None = typer.Option(None, "--max-length", help="Drop examples longer than this (tokens)."),
    out_dir: Path | None = typer.Option(None, "--out", help="Output folder (default <home>/datasets/<name>)."),
    base: str | None = typer.Option(None, "--base", help="Base model whose tokenizer checks the examples."),
    as_json: bool = JsonOpt,
) -> None:
    """Build an SFT or DPO dataset (JSONL + dataset card) from the experience bank."""
    from crl.agent.finetuning import finetune_config, finetune_context
    from crl.finetune.dataset_card import read_card
    from crl.finetune.rounds import make_dataset

    settings = effective_settings()
    config = finetune_config(settings, min_value=min_value, max_length=max_length)
    ctx = finetune_context(settings, config, base=base, evaluator=False)
    path = make_dataset(ctx, kind.value, family=family, tasks=task, out_dir=out_dir)
    card = read_card(path)
    emit(
        card.model_dump(mode="json", exclude=CARD_ID_LISTS),
        as_json,
        lambda: card_view(card, path),
    )


@command(dataset_app, "show")
def dataset_show(
    name: str = typer.Argument(..., help="Dataset name (or unique prefix) or folder."),
    n: int = typer.Option(3, "-n", help="Examples to preview."),
    as_json: bool = JsonOpt,
) -> None:
    """The dataset card and the first examples."""
    from crl.finetune.dataset_card import load_rows, read_card, resolve_dataset

    path = resolve_dataset(Path(effective_settings().home) / "datasets", name)
    card = read_card(path)
    rows = load_rows(path)
    preview = [rows[i] for i in range(min(n, len(rows)))]

    def render() -> None:
        out.print(card_view(card, path))
        for i, row in enumerate(preview):
            out.rule(Text(f"example {i} · {row.get('task', '')} · {row.get('level', '')}".rstrip(" ·")))
            for m in row["prompt"]:
                out.print(Text.assemble((m["role"], "bold"), ": ", m["content"]))
            for key in ("completion", "chosen", "rejected"):
                if key in row:
                    out.print(Text.assemble((key, "bold green"), ": ", row[key][-1]["content"]))

    data = card.model_dump(mode="json", exclude=CARD_ID_LISTS) | {"preview": preview}
    emit(data, as_json, render)


DATASET_COLUMNS = [
    Col("name"),
    Col("kind"),
    Col("examples", right=True),
    Col("tasks", wrap=True, drop=1, fmt=", ".join),
    Col("sha256", drop=2),
]


@command(dataset_app, "ls")
def dataset_ls(as_json: bool = JsonOpt) -> None:
    """Datasets under the data directory."""
    from crl.finetune.dataset_card import list_datasets

    cards = list_datasets(Path(effective_settings().home) / "datasets")
    rows = [
        {"name": c.name, "kind": c.kind, "examples": c.examples, "tasks": c.tasks, "sha256": c.sha256[:12]}
        for c in cards
    ]
    emit(rows, as_json, DATASET_COLUMNS, title="datasets")


# ---- crl finetune ---------------------------------------------------------------------------


def train(
    kind: str,
    dataset: str | None,
    family: str | None,
    base: str | None,
    from_adapter: str | None,
    resume: str | None,
    gate: bool,
    flags: dict[str, Any],
    as_json: bool,
) -> None:
    """Build (unless given) a dataset, train an adapter on it, register it and, with `gate`, gate it."""
    from crl.agent.finetuning import finetune_config, finetune_context
    from crl.finetune.dataset_card import resolve_dataset
    from crl.finetune.rounds import gate_adapter, make_dataset, train_and_register

    settings = effective_settings()
    config = finetune_config(settings, **flags)
    ctx = finetune_context(settings, config, base=base, evaluator=gate, progress=not as_json)
    dataset_dir = None
    if not resume:
        dataset_dir = resolve_dataset(ctx.datasets_dir, dataset) if dataset else make_dataset(ctx, kind, family=family)
    if from_adapter is None and kind == "dpo" and not resume:
        from_adapter = ctx.registry.promoted(ctx.base_model)
    try:
        result, lineage = train_and_register(ctx, kind, dataset_dir, from_adapter=from_adapter, resume_job=resume)
    except KeyboardInterrupt:
        err.print(
            "[yellow]interrupted[/]: continue from the last checkpoint with `crl finetune "
            f"{kind} --resume JOB` (jobs are under {ctx.jobs_dir})"
        )
        raise typer.Exit(130) from None
    if lineage is None:
        return
    report: dict[str, Any] = {
        "adapter": lineage.id,
        "dataset": lineage.dataset.name,
        "parent": lineage.parent,
        "metrics": lineage.metrics,
    }
    if gate:
        report["gate"] = gate_adapter(ctx, lineage.id).model_dump()

    def render() -> None:
        m = lineage.metrics
        out.print(
            f"adapter [bold]{lineage.id}[/] trained on {lineage.dataset.name} ({lineage.dataset.examples} "
            f"examples): loss {m.get('first_loss')} -> {m.get('last_loss')}, {m['steps']} steps, "
            f"{m['wall_seconds']:.0f} s, {m['examples_per_s']:.2f} examples/s",
            highlight=False,
        )
        if gate:
            g = report["gate"]
            verdict = "[green]promoted[/]" if g["promoted"] else "[red]not promoted[/]"
            out.print(f"gate: {verdict}: {g['reason']}", highlight=False)

    emit(report, as_json, render)


def train_flags(epochs, lr, rank, alpha, target_modules, max_length, max_steps, batch_size) -> dict[str, Any]:
    """The training options as `finetune_config` keywords."""
    return {
        "epochs": epochs,
        "learning_rate": lr,
        "lora_rank": rank,
        "lora_alpha": alpha,
        "target_modules": target_modules.split(",") if target_modules else None,
        "max_length": max_length,
        "max_steps": max_steps,
        "batch_size": batch_size,
    }


DatasetOpt = typer.Option(None, "--dataset", help="Dataset name or folder (default: build one from the bank now).")
FamilyOpt = typer.Option(None, "--family", help="Task family of the dataset built when --dataset is not given.")
BaseOpt = typer.Option(None, "--base", help="Base model (default: llm.model, or the embedded SmolLM2-135M).")
FromAdapterOpt = typer.Option(None, "--from-adapter", help="Registered adapter to continue training from.")
ResumeOpt = typer.Option(None, "--resume", help="Continue an interrupted job from its last checkpoint.")
GateOpt = typer.Option(True, "--gate/--no-gate", help="Evaluate on dev seeds and promote if not worse.")
EpochsOpt = typer.Option(None, "--epochs", help="Passes over the dataset.")
LrOpt = typer.Option(None, "--lr", help="Peak learning rate.")
RankOpt = typer.Option(None, "--rank", help="LoRA rank.")
AlphaOpt = typer.Option(None, "--alpha", help="LoRA alpha.")
TargetsOpt = typer.Option(None, "--target-modules", help="Comma-separated module names, or all-linear.")
MaxLenOpt = typer.Option(None, "--max-length", help="Longest example in tokens.")
MaxStepsOpt = typer.Option(None, "--max-steps", help="Optimizer steps (overrides --epochs).")
BatchOpt = typer.Option(
    None,
    "--batch-size",
    help="Examples per micro-step on each process (default 1 on CPU, 4 on CUDA); micro-steps add up to 8 examples per optimizer step.",
)


@command(finetune_app, "sft")
def finetune_sft(
    dataset: str | None = DatasetOpt,
    family: str | None = FamilyOpt,
    base: str | None = BaseOpt,
    from_adapter: str | None = FromAdapterOpt,
    resume: str | None = ResumeOpt,
    gate: bool = GateOpt,
    epochs: float | None = EpochsOpt,
    lr: float | None = LrOpt,
    rank: int | None = RankOpt,
    alpha: int | None = AlphaOpt,
    target_modules: str | None = TargetsOpt,
    max_length: int | None = MaxLenOpt,
    max_steps: int | None = MaxStepsOpt,
    batch_size: int | None = BatchOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Train a LoRA adapter with SFT on successful trajectories, register it, gate it."""
    flags = train_flags(epochs, lr, rank, alpha, target_modules, max_length, max_steps, batch_size)
    train("sft", dataset, family, base, from_adapter, resume, gate, flags, as_json)


@command(finetune_app, "dpo")
def finetune_dpo(
    dataset: str | None = DatasetOpt,
    family: str | None = FamilyOpt,
    base: str | None = BaseOpt,
    from_adapter: str | None = typer.Option(
        None, "--from-adapter", help="Adapter to continue from (default: the promoted one, if any)."
    ),
    resume: str | None = ResumeOpt,
    gate: bool = GateOpt,
    epochs: float | None = EpochsOpt,
    lr: float | None = LrOpt,
    rank: int | None = RankOpt,
    alpha: int | None = AlphaOpt,
    target_modules: str | None = TargetsOpt,
    max_length: int | None = MaxLenOpt,
    max_steps: int | None = MaxStepsOpt,
    batch_size: int | None = BatchOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Train with DPO on success/failure pairs (on top of the promoted adapter), register it, gate it."""
    flags = train_flags(epochs, None, rank, alpha, target_modules, max_length, max_steps, batch_size)
    if lr is not None:
        flags["dpo_learning_rate"] = lr
    train("dpo", dataset, family, base, from_adapter, resume, gate, flags, as_json)


@command(finetune_app, "auto")
def finetune_auto(
    once: bool = typer.Option(False, "--once", help="Check once (and run a round if due), then exit."),
    min_new: int | None = typer.Option(None, "--min-new", help="New qualifying episodes that start a round."),
    kind: RoundKind | None = typer.Option(None, "--kind", help="What a round trains."),
    interval: float | None = typer.Option(None, "--interval", help="Seconds between checks."),
    as_json: bool = JsonOpt,
) -> None:
    """Start a round (build -> train -> gate -> promote) whenever enough new experience has arrived."""
    from crl.agent.finetuning import finetune_config, finetune_context, round_message, round_report
    from crl.finetune.scheduler import maybe_run_round

    settings = effective_settings()
    config = finetune_config(settings, auto_min_new_episodes=min_new, auto_kind=value(kind), auto_interval_s=interval)
    ctx = finetune_context(settings, config, progress=not as_json)
    while True:
        line = {"time": time.time()} | round_report(*maybe_run_round(ctx))
        emit(line, as_json, lambda line=line: Text.from_markup(round_message(line)))
        if once:
            return
        time.sleep(config.auto_interval_s)


ROUND_COLUMNS = [
    Col("round", right=True),
    Col("started", drop=2),
    Col("status"),
    Col("new_episodes", "new episodes", right=True, drop=3),
    Col("adapters"),
    Col("error", wrap=True, drop=1),
]


@command(finetune_app, "rounds")
def finetune_rounds(as_json: bool = JsonOpt) -> None:
    """Every scheduled round with its outcome."""
    from dataclasses import asdict

    from crl.finetune.scheduler import read_rounds

    rounds = read_rounds(effective_settings().home)
    rows = [
        {
            "round": r.round,
            "started": time.strftime("%Y-%m-%d %H:%M", time.localtime(r.started_at)),
            "status": r.status,
            "new_episodes": r.trigger.get("new_episodes"),
            "adapters": ", ".join(s.get("adapter") or "-" for s in r.steps if "kind" in s),
            "error": r.error or "",
        }
        for r in rounds
    ]
    emit([asdict(r) for r in rounds] if as_json else rows, as_json, ROUND_COLUMNS, title="fine-tuning rounds")


# ---- crl adapters ---------------------------------------------------------------------------


def registry_of_settings():
    """The effective settings and the adapter registry of their data directory."""
    from crl.finetune.registry import AdapterRegistry

    settings = effective_settings()
    return settings, AdapterRegistry.of(settings)


def quarantined_sources(settings) -> set[str] | None:
    """Record ids now quarantined, or None when the bank cannot be read (it is busy)."""
    from crl.agent.app import open_bank
    from crl.finetune.source import quarantined_ids

    try:
        with open_bank(settings, actor="adapters") as bank:
            return quarantined_ids(bank)
    except Exception as exc:  # listing adapters must work while a run owns the bank
        err.print(f"[yellow]warning:[/] cannot check quarantined memories ({exc})", highlight=False)
        return None


def gate_text(gate: dict | None) -> str:
    """An adapter's last gate decision as `candidate vs current` success."""
    return "-" if gate is None else f"{gate['candidate_rate']:.0%} vs {gate['current_rate']:.0%}"


def adapter_flags(row: dict[str, Any]) -> Text:
    """The flags cell: malicious data (its own or a parent's), then the other since-quarantined sources."""
    from crl.memory.contamination import is_marked

    flags = Text()
    if row.get("malicious_sources"):
        flags.append(f"trained on {len(row['malicious_sources'])} malicious record(s)", style="bold red")
    elif row.get("malicious_prompts"):
        flags.append(f"{len(row['malicious_prompts'])} malicious record(s) in its prompts", style="bold red")
    elif row.get("malicious_via"):
        flags.append(f"parent {row['malicious_via']} trained on malicious data", style="bold red")
    malicious = set(row.get("malicious_sources") or [])
    quarantined = [i for i in row.get("quarantined_sources") or [] if not is_marked(i, malicious)]
    if quarantined:
        flags.append("; " if flags else "")
        flags.append(f"{len(quarantined)} quarantined source(s)", style="magenta")
    return flags


ADAPTER_COLUMNS = [
    Col("id"),
    Col("kind", drop=3),
    Col("namespace", drop=6),
    Col("parent", drop=4),
    Col("dataset", drop=5, fmt=None),
    Col("gate", drop=2, fmt=gate_text),
    Col("promoted", "", fmt=lambda p: Text("promoted", style="bold green") if p else Text("")),
    Col("flags", drop=1, fmt=lambda f: f),
]


def malicious_taints(settings, registry) -> dict[str, Any]:
    """Each adapter's contamination by records marked malicious, read from the journals (no store lock)."""
    from crl.finetune.contamination import adapter_taints, home_marks

    return adapter_taints(registry, home_marks(settings.memory_dir))


@command(adapters_app, "ls")
def adapters_ls(
    contaminated: bool = typer.Option(
        False, "--contaminated", help="Only adapters trained on records marked malicious (or continued from one)."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Adapters with lineage; promoted ones marked; those trained on records marked malicious (by
    `crl memory quarantine --malicious`, or continued from such an adapter) and on since-quarantined
    memories flagged."""
    settings, registry = registry_of_settings()
    quarantined = quarantined_sources(settings)
    taints = malicious_taints(settings, registry)
    rows = []
    for a in registry.ls():
        card = registry.card(a.id)
        tainted = sorted(set(card.source_episode_ids + card.source_step_ids) & quarantined) if quarantined else []
        taint = taints[a.id]
        if contaminated and not taint.contaminated:
            continue
        last_gate = a.gate[-1] if a.gate else None
        rows.append(
            {
                "id": a.id,
                "kind": a.kind,
                "base_model": a.base_model,
                "namespace": a.namespace,
                "parent": a.parent,
                "dataset": a.dataset.name,
                "examples": a.dataset.examples,
                "promoted": registry.promoted(a.base_model) == a.id,
                "gate": None
                if last_gate is None
                else {
                    "promoted": last_gate.promoted,
                    "candidate_rate": last_gate.candidate_rate,
                    "current_rate": last_gate.current_rate,
                },
                "quarantined_sources": tainted,
                "malicious_sources": taint.records,
                "malicious_prompts": taint.prompted,
                "malicious_via": taint.via,
                "contaminated": taint.contaminated,
            }
        )
    shown = [r | {"dataset": f"{r['dataset']} ({r['examples']})", "flags": adapter_flags(r)} for r in rows]
    emit(rows, as_json, lambda: fitted_table(shown, ADAPTER_COLUMNS, out.width, f"adapters in {registry.root}"))


@command(adapters_app, "show")
def adapters_show(
    adapter: str = typer.Argument(..., help="Adapter id or unique prefix."), as_json: bool = JsonOpt
) -> None:
    """An adapter's full lineage: base model, dataset, parent, config, metrics, gate decisions, and the
    records marked malicious its data included."""
    settings, registry = registry_of_settings()
    lineage = registry.get(adapter)
    taint = malicious_taints(settings, registry)[lineage.id]
    data = lineage.model_dump(mode="json") | {
        "path": str(registry.adapter_dir(lineage.id)),
        "promoted": registry.promoted(lineage.base_model) == lineage.id,
        "malicious_sources": taint.records,
        "malicious_prompts": taint.prompted,
        "malicious_via": taint.via,
        "contaminated": taint.contaminated,
    }

    def render() -> Table:
        m, cfg = lineage.metrics, lineage.config
        table = Table(title=f"adapter {lineage.id}", show_header=False, title_justify="left")
        table.add_column(no_wrap=True)
        table.add_column()
        for key in ("kind", "base_model", "namespace", "parent", "path", "promoted"):
            table.add_row(key, Text(str(data[key] if data[key] is not None else "-")))
        table.add_row(
            "dataset",
            f"{lineage.dataset.name} ({lineage.dataset.examples} examples, sha256 {lineage.dataset.sha256[:12]})",
        )
        if taint.records:
            table.add_row(
                "malicious", Text(f"trained on {', '.join(taint.records)} (marked malicious)", style="bold red")
            )
        if taint.prompted:
            shown = ", ".join(taint.prompted)
            table.add_row("malicious", Text(f"{shown} retrieved into its training prompts", style="bold red"))
        if taint.via:
            table.add_row("malicious", Text(f"continued from {taint.via}, trained on malicious data", style="bold red"))
        table.add_row("created", time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(lineage.created_at)))
        table.add_row(
            "metrics",
            f"loss {m.get('first_loss')} -> {m.get('last_loss')}, {m.get('steps')} steps, "
            f"{m.get('examples_per_s') or 0:.2f} examples/s",
        )
        table.add_row(
            "lora", f"r={cfg.get('lora_rank')} alpha={cfg.get('lora_alpha')} {','.join(cfg.get('target_modules', []))}"
        )
        for g in lineage.gate:
            table.add_row("gate", Text(f"{'promoted' if g.promoted else 'refused'}: {g.reason}"))
        return table

    emit(data, as_json, render)


@command(adapters_app, "promote")
def adapters_promote(
    adapter: str = typer.Argument(..., help="Adapter id or unique prefix."),
    force: bool = typer.Option(False, "--force", help="Promote without the evaluation gate (recorded as manual)."),
    as_json: bool = JsonOpt,
) -> None:
    """Promote an adapter if it passes the gate (dev seeds, not worse than the current one)."""
    from crl.agent.finetuning import local_evaluator
    from crl.finetune.gate import run_gate

    settings, registry = registry_of_settings()
    lineage = registry.get(adapter)
    if force:
        entry = registry.promote(lineage.id, reason="manual (--force, no gate)", actor="user")
        result: dict[str, Any] = {"promoted": True, "reason": entry.reason, "previous": entry.previous}
    else:
        config = settings.finetune
        decision = run_gate(registry, lineage.id, local_evaluator(settings, memory=config.gate_memory), config)
        result = decision.model_dump(mode="json")
    verdict = "[green]promoted[/]" if result["promoted"] else "[red]not promoted[/]"
    emit(result, as_json, lambda: Text.from_markup(f"{lineage.id}: {verdict} ({escape(str(result['reason']))})"))


@command(adapters_app, "rollback")
def adapters_rollback(base: str | None = BaseOpt, as_json: bool = JsonOpt) -> None:
    """Restore the adapter promoted before the current one (or no adapter)."""
    from crl.finetune.registry import base_model_key

    settings, registry = registry_of_settings()
    entry = registry.rollback(base_model_key(base or settings.llm.model), reason="rollback", actor="user")
    emit(
        entry.model_dump(mode="json"),
        as_json,
        f"rolled back {entry.previous}; promoted now: {entry.adapter or 'none (base model)'}",
    )


@command(adapters_app, "rm")
def adapters_rm(adapter: str = typer.Argument(..., help="Adapter id or unique prefix.")) -> None:
    """Delete an adapter that is neither promoted nor restorable by a rollback."""
    _, registry = registry_of_settings()
    emit(None, False, f"removed {registry.rm(adapter)}")


@command(adapters_app, "serve-args")
def adapters_serve_args(
    adapters: list[str] | None = typer.Argument(None, help="Adapters to serve (default: the promoted one)."),
    base: str | None = BaseOpt,
    args_only: bool = typer.Option(
        False, "--args-only", help="Only the LoRA arguments (for `vllm serve BASE $(...)`)."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """The `vllm serve` command that serves the base model with adapters by name (default: the promoted one)."""
    import shlex

    from crl.agent.finetuning import base_model_path
    from crl.finetune.registry import base_model_key
    from crl.finetune.serving import lora_args, vllm_serve_command

    settings, registry = registry_of_settings()
    key = base_model_key(base or settings.llm.model)
    if args_only:
        argv = lora_args(registry, key, adapters)
    else:
        argv = vllm_serve_command(registry, key, base_model_path(settings, base), adapters)
    emit(argv, as_json, shlex.join(argv))


# ---- standalone entry point (for `accelerate launch -m crl.agent.cli.finetune ...`) ----------

standalone = typer.Typer(no_args_is_help=True, pretty_exceptions_show_locals=False)
standalone.callback()(global_options)
standalone.add_typer(dataset_app, name="dataset")
standalone.add_typer(finetune_app, name="finetune")
standalone.add_typer(adapters_app, name="adapters")

if __name__ == "__main__":  # pragma: no cover
    standalone()
