"""The `crl` command line: thin wrappers over `agent.app` with rich output and `--json`."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from agent.cli_progress import EpisodeProgress
from agent.config import Settings, explain_settings, load_settings
from agent.llm.base import LLMError
from agent.llm.factory import choose_model

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

app = typer.Typer(
    help="Complementary RL: LLM agents that get better by reusing their own experience.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
out = Console()
err = Console(stderr=True)

_STATE: dict[str, Any] = {"config": None, "home": None}


@app.callback()
def main(
    config: Optional[Path] = typer.Option(None, "--config", help="TOML config file (default ./crl.toml)."),
    home: Optional[Path] = typer.Option(None, "--home", help="Data directory (default ./.crl, or $CRL_HOME)."),
) -> None:
    """Global options shared by every command."""
    _STATE["config"] = config
    _STATE["home"] = home


def _overrides(**flags: Any) -> dict[str, Any]:
    """CLI flags as a nested settings dict; `None` means not given."""
    nested: dict[str, Any] = {}
    if _STATE["home"] is not None:
        nested["home"] = _STATE["home"]
    for dotted, value in flags.items():
        if value is None:
            continue
        section, _, key = dotted.partition("__")
        if key:
            nested.setdefault(section, {})[key] = value
        else:
            nested[section] = value
    return nested


def _settings(overrides: dict[str, Any]) -> Settings:
    return load_settings(overrides, _STATE["config"])


def _memory_errors() -> tuple[type[Exception], ...]:
    from memory.apply import MissingContentError
    from memory.embeddings import EmbeddingModelError
    from memory.journal import JournalError
    from memory.locks import StoreLockedError
    from memory.results import IngestError
    from memory.store import StoreError

    return (StoreLockedError, StoreError, JournalError, IngestError, EmbeddingModelError, MissingContentError)


def friendly_errors(fn):
    """Turn the errors a user can fix into one red line and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (ValueError, FileNotFoundError, LookupError, ImportError, LLMError, PermissionError, *_memory_errors()) as exc:
            err.print(f"[bold red]error:[/] {exc}")
            raise typer.Exit(1)
        except KeyboardInterrupt:
            err.print("[yellow]interrupted[/]: every finished step is in the run's log; continue with --resume RUN_ID")
            raise typer.Exit(130)

    return wrapper


def _model_flags(model, backend, base_url, adapter) -> dict[str, Any]:
    return {"llm__model": model, "llm__backend": backend, "llm__base_url": base_url, "llm__adapter": adapter}


ModelOpt = typer.Option(None, "--model", help="Hub id, folder, .gguf file, or remote model name.")
BackendOpt = typer.Option(None, "--backend", help="local, openai or auto.")
BaseUrlOpt = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint (implies --backend openai).")
AdapterOpt = typer.Option(None, "--adapter", help="LoRA adapter folder for a local model.")
MemoryUrlOpt = typer.Option(None, "--memory-url", help="Chroma server shared by several processes (http://HOST:PORT).")
MemoryModeOpt = typer.Option(None, "--memory", help="Memories in prompts: off, cases, steps or full.")
PolicyOpt = typer.Option(None, "--policy", help="Who acts: llm, memory (episodic control), mixed, or random (baseline).")
KSuccessOpt = typer.Option(None, "--k-success", help="Successful episodes shown per step.")
KFailureOpt = typer.Option(None, "--k-failure", help="Failed episodes shown per step (the contrast).")
EpsilonOpt = typer.Option(None, "--epsilon", help="Chance a memory slot goes to a novel, rarely used memory.")
NoUtilityOpt = typer.Option(False, "--no-utility", help="Rank memories without their learned utility.")
RerankOpt = typer.Option(None, "--rerank", help="default or cross-encoder (needs retrieval.cross_encoder_model).")


def _memory_flags(memory, policy, k_success, k_failure, epsilon, no_utility, rerank) -> dict[str, Any]:
    return {
        "agent__memory": memory,
        "agent__policy": policy,
        "retrieval__k_success": k_success,
        "retrieval__k_failure": k_failure,
        "retrieval__epsilon": epsilon,
        "retrieval__use_utility": False if no_utility else None,
        "retrieval__rerank": rerank,
    }


JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON instead of tables.")


def _print_report(report: dict, title: str) -> None:
    table = Table(title=title, show_header=False)
    lo, hi = report["ci95"]
    table.add_row("run", report["run_id"])
    table.add_row("task", report["task"])
    table.add_row("model", report["model"])
    table.add_row("episodes", str(report["episodes"]))
    table.add_row("success rate", f"{report['success_rate']:.1%}  (95% CI {lo:.1%} – {hi:.1%})")
    table.add_row("mean steps", f"{report['mean_steps']:.1f}")
    table.add_row("invalid-action rate", f"{report['invalid_action_rate']:.1%}")
    table.add_row("throughput", f"{report['steps_per_s']:.2f} steps/s, {report['generated_tokens_per_s']:.1f} gen tok/s")
    table.add_row("wall time", f"{report['wall_seconds']:.1f} s")
    out.print(table)


@app.command()
@friendly_errors
def run(
    task: str = typer.Argument(..., help="Task name, e.g. keyroom/key (see `crl tasks`)."),
    episodes: int = typer.Option(10, "--episodes", "-n", help="Episodes to play."),
    parallel: Optional[int] = typer.Option(None, "--parallel", "-k", help="Episodes played at once (batched)."),
    seed: int = typer.Option(0, "--seed", help="Offset into the task's train seeds."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Step limit per episode."),
    resume: Optional[str] = typer.Option(None, "--resume", help="Continue an interrupted run by id."),
    no_memory: bool = typer.Option(False, "--no-memory", help="Do not store this run's experience in the bank."),
    no_reflect: bool = typer.Option(False, "--no-reflect", help="Do not distil rules every reflect.every episodes."),
    reflect_model: Optional[str] = typer.Option(None, "--reflect-model", help="A (stronger) model that reflects; default: the acting model."),
    finetune_auto: Optional[bool] = typer.Option(
        None, "--finetune-auto/--no-finetune-auto",
        help="When the run ends, start a fine-tuning round (build, train, gate, promote) if enough new qualifying episodes arrived.",
    ),
    memory_url: Optional[str] = MemoryUrlOpt,
    memory: Optional[str] = MemoryModeOpt,
    policy: Optional[str] = PolicyOpt,
    k_success: Optional[int] = KSuccessOpt,
    k_failure: Optional[int] = KFailureOpt,
    epsilon: Optional[float] = EpsilonOpt,
    no_utility: bool = NoUtilityOpt,
    rerank: Optional[str] = RerankOpt,
    model: Optional[str] = ModelOpt,
    backend: Optional[str] = BackendOpt,
    base_url: Optional[str] = BaseUrlOpt,
    adapter: Optional[str] = AdapterOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Play episodes of a task with the agent and log every step."""
    from agent import app as crl

    settings = _settings(
        _overrides(
            agent__parallel=parallel,
            agent__max_steps=max_steps,
            memory__enabled=False if no_memory else None,
            memory__url=memory_url,
            reflect__enabled=False if no_reflect else None,
            reflect__model=reflect_model,
            finetune__auto_after_run=finetune_auto,
            **_memory_flags(memory, policy, k_success, k_failure, epsilon, no_utility, rerank),
            **_model_flags(model, backend, base_url, adapter),
        )
    )
    if resume:
        store = crl.find_run(crl.run_stores(settings), resume)
        info = store.load(resume)
        total, task = len(info.seeds), info.task
        done = sum(1 for e in store.episodes(resume) if e.finished)
    else:
        crl.get_task(task)
        total, done = episodes, 0
    with EpisodeProgress(total, err, initial=done, description=task) as progress:
        if resume:
            result = crl.resume_run(settings, resume, progress=progress)
        else:
            result = crl.start_run(settings, task, episodes, seed_start=seed, progress=progress)
    report = result.report()
    if settings.finetune.auto_after_run:
        report["finetune_round"] = _finetune_after_run(settings, quiet=as_json)
    if as_json:
        out.print_json(json.dumps(report, default=str))
    else:
        _print_report(report, f"crl run {task}")


def _finetune_after_run(settings, quiet: bool) -> dict:
    """Check the fine-tuning scheduler once and run a round if one is due (`--finetune-auto`)."""
    from agent.cli_finetune import finetune_context, round_message, round_report
    from finetune.scheduler import maybe_run_round

    line = round_report(*maybe_run_round(finetune_context(settings, progress=not quiet)))
    if not quiet:
        err.print(round_message(line))
    return line


@app.command("eval")
@friendly_errors
def evaluate(
    task: str = typer.Argument(..., help="Task name (see `crl tasks`)."),
    fold: str = typer.Option("dev", "--fold", help="dev or test seeds."),
    episodes: int = typer.Option(20, "--episodes", "-n", help="Episodes to evaluate."),
    parallel: Optional[int] = typer.Option(None, "--parallel", "-k"),
    max_steps: Optional[int] = typer.Option(None, "--max-steps"),
    memory_url: Optional[str] = MemoryUrlOpt,
    memory: Optional[str] = MemoryModeOpt,
    policy: Optional[str] = PolicyOpt,
    k_success: Optional[int] = KSuccessOpt,
    k_failure: Optional[int] = KFailureOpt,
    epsilon: Optional[float] = EpsilonOpt,
    no_utility: bool = NoUtilityOpt,
    rerank: Optional[str] = RerankOpt,
    model: Optional[str] = ModelOpt,
    backend: Optional[str] = BackendOpt,
    base_url: Optional[str] = BaseUrlOpt,
    adapter: Optional[str] = AdapterOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Success rate (with a 95% interval), mean steps and invalid-action rate on held-out seeds."""
    from agent import app as crl

    if fold not in ("dev", "test"):
        raise ValueError("--fold must be dev or test (train seeds are for collecting experience)")
    settings = _settings(
        _overrides(
            agent__parallel=parallel,
            agent__max_steps=max_steps,
            memory__url=memory_url,
            **_memory_flags(memory, policy, k_success, k_failure, epsilon, no_utility, rerank),
            **_model_flags(model, backend, base_url, adapter),
        )
    )
    crl.get_task(task)
    with EpisodeProgress(episodes, err, description=f"eval {task} [{fold}]") as progress:
        result = crl.start_run(settings, task, episodes, fold=fold, kind="eval", progress=progress)
    report = result.report() | {"fold": fold}
    if as_json:
        out.print_json(json.dumps(report))
    else:
        _print_report(report, f"crl eval {task} ({fold} fold)")


@app.command()
@friendly_errors
def tasks(
    family: Optional[str] = typer.Argument(None, help="Only this family (keyroom, twx, sciworld, tw)."),
    long: bool = typer.Option(False, "--long", "-l", help="Add descriptions and seed ranges."),
    as_json: bool = JsonOpt,
) -> None:
    """List the tasks, their step limits and seed folds."""
    from tasks.registry import FOLDS, list_tasks

    specs = [s for s in list_tasks() if family is None or s.family == family]
    if family is not None and not specs:
        raise ValueError(f"no task family {family!r}; families: {', '.join(sorted({s.family for s in list_tasks()}))}")
    rows = [
        {
            "name": s.name,
            "max_steps": s.max_steps,
            **{f: f"{s.folds.get(f).start}-{s.folds.get(f).stop - 1}" for f in FOLDS},
            "sizes": "/".join(str(len(s.folds.get(f))) for f in FOLDS),
            "description": s.description,
        }
        for s in specs
    ]
    if as_json:
        out.print_json(json.dumps(rows))
        return
    table = Table(title=f"tasks ({len(rows)})", caption=None if long else "--long adds descriptions and seed ranges")
    table.add_column("name", style="bold", overflow="fold", max_width=44)
    table.add_column("steps", justify="right", min_width=5, no_wrap=True)
    table.add_column("train/dev/test", justify="right", no_wrap=True)
    if long:
        table.add_column("description")
    for r in rows:
        seeds = r["sizes"] if not long else f"{r['train']} / {r['dev']} / {r['test']}"
        table.add_row(r["name"], str(r["max_steps"]), seeds, *([r["description"]] if long else []))
    out.print(table)


@app.command()
@friendly_errors
def models(
    model: Optional[str] = ModelOpt,
    backend: Optional[str] = BackendOpt,
    base_url: Optional[str] = BaseUrlOpt,
    adapter: Optional[str] = AdapterOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Which backend and model a command would use, and why."""
    settings = _settings(_overrides(**_model_flags(model, backend, base_url, adapter)))
    choice = choose_model(settings.llm)
    row = {"backend": choice.backend, "model": choice.model, "adapter": choice.adapter, "reason": choice.reason}
    if choice.backend == "local" and settings.llm.model is None:
        row["cache"] = str(settings.models_dir)
    if as_json:
        out.print_json(json.dumps(row))
        return
    table = Table(show_header=False, title="model in effect")
    for k, v in row.items():
        table.add_row(k, str(v))
    out.print(table)


@app.command("config")
@friendly_errors
def show_config(as_json: bool = JsonOpt) -> None:
    """The effective configuration and where each value came from (secrets masked)."""
    overrides = _overrides()
    settings = _settings(overrides)
    rows = explain_settings(settings, overrides, _STATE["config"])
    if as_json:
        out.print_json(json.dumps([{"key": k, "value": v, "source": s} for k, v, s in rows], default=str))
        return
    table = Table(title="configuration")
    table.add_column("key")
    table.add_column("value")
    table.add_column("source")
    for k, v, s in rows:
        table.add_row(k, repr(v) if v is None else str(v), s)
    out.print(table)


@app.command()
@friendly_errors
def runs(as_json: bool = JsonOpt) -> None:
    """List runs with their outcome so far."""
    from agent.app import run_stores
    from agent.runs import summarise

    stores = run_stores(_settings(_overrides()))
    rows = []
    for store, info in sorted(((s, i) for s in stores for i in s.list()), key=lambda si: si[1].run_id):
        s = summarise(store.episodes(info.run_id))
        rows.append(
            {
                "run_id": info.run_id,
                "kind": info.kind,
                "task": info.task,
                "model": info.model,
                "status": info.status,
                "episodes": f"{s.finished}/{len(info.seeds)}",
                "success_rate": s.success_rate,
            }
        )
    if as_json:
        out.print_json(json.dumps(rows))
        return
    table = Table(title=f"runs in {stores[0].dir.parent}")
    for col in ("run_id", "kind", "task", "model", "status", "episodes", "success"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["run_id"], r["kind"], r["task"], r["model"], r["status"], r["episodes"], f"{r['success_rate']:.0%}")
    out.print(table)


@app.command()
@friendly_errors
def show(
    run_id: str = typer.Argument(..., help="Run id (see `crl runs`)."),
    episode: Optional[int] = typer.Argument(None, help="Episode number within the run; all when omitted."),
    as_json: bool = JsonOpt,
) -> None:
    """Pretty-print a run's trajectories: observation, thought, action, reward."""
    from agent.app import run_stores
    from agent.render import render_episode
    from agent.runs import find_run

    store = find_run(run_stores(_settings(_overrides())), run_id)
    episodes = store.episodes(run_id)
    if episode is not None:
        wanted = f"{run_id}-{episode:04d}"
        episodes = [e for e in episodes if e.episode_id == wanted]
        if not episodes:
            raise ValueError(f"run {run_id} has no episode {episode}")
    if as_json:
        out.print_json(json.dumps([e.to_dict() for e in episodes]))
        return
    for e in episodes:
        render_episode(out, e)


@app.command()
@friendly_errors
def explain(
    run_id: str = typer.Argument(..., help="Run id (see `crl runs`)."),
    episode: int = typer.Argument(..., help="Episode number within the run."),
    step: Optional[int] = typer.Argument(None, help="One step only."),
    as_json: bool = JsonOpt,
) -> None:
    """What memory offered at each step, why (score breakdown), and what the agent then did."""
    from agent.app import run_stores
    from agent.explain import explain_step, render_explanation
    from agent.runs import find_run

    store = find_run(run_stores(_settings(_overrides())), run_id)
    wanted = f"{run_id}-{episode:04d}"
    found = [e for e in store.episodes(run_id) if e.episode_id == wanted]
    if not found:
        raise ValueError(f"run {run_id} has no episode {episode}")
    ep = found[0]
    if step is not None and not any(s.index == step for s in ep.steps):
        raise ValueError(f"episode {episode} has no step {step} (it has {len(ep.steps)})")
    if as_json:
        out.print_json(json.dumps([explain_step(s) for s in ep.steps if step is None or s.index == step]))
        return
    render_explanation(out, ep, step)


experiment_app = typer.Typer(help="Learning curves: how much experience reuse helps.", no_args_is_help=True)
app.add_typer(experiment_app, name="experiment")


@experiment_app.command("curve")
@friendly_errors
def experiment_curve(
    task: str = typer.Argument(..., help="Task name (see `crl tasks`)."),
    arms: str = typer.Option("random,none,memory,mixed", "--arms", help="Comma-separated: none, random, memory, memory+rules, mixed, mixed+rules, episodic."),
    budget: int = typer.Option(40, "--budget", help="Training episodes per arm and repeat."),
    eval_every: int = typer.Option(10, "--eval-every", help="Evaluate after every E training episodes."),
    eval_episodes: int = typer.Option(20, "--eval-episodes", help="Dev episodes per evaluation (the same seeds each time)."),
    repeats: int = typer.Option(3, "--repeats", help="Repeats per arm (each with its own train seeds and fresh memory)."),
    out_dir: Path = typer.Option(Path("experiments/curve"), "--out", help="Results folder (an interrupted experiment resumes)."),
    parallel: Optional[int] = typer.Option(None, "--parallel", "-k"),
    max_steps: Optional[int] = typer.Option(None, "--max-steps"),
    model: Optional[str] = ModelOpt,
    backend: Optional[str] = BackendOpt,
    base_url: Optional[str] = BaseUrlOpt,
    adapter: Optional[str] = AdapterOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Train each arm on train seeds and evaluate it on dev seeds every E episodes; writes
    results.json, curve.png and table.md."""
    from agent.experiment import ARMS, CurveSpec, run_curve, summarise
    from agent.llm.factory import build_chat_model

    arm_list = [a.strip() for a in arms.split(",") if a.strip()]
    unknown = [a for a in arm_list if a not in ARMS]
    if unknown:
        raise ValueError(f"unknown arm(s) {', '.join(unknown)}; arms: {', '.join(ARMS)}")
    if eval_every <= 0 or budget % eval_every:
        raise ValueError("--budget must be a positive multiple of --eval-every")
    overrides = _overrides(agent__parallel=parallel, agent__max_steps=max_steps, **_model_flags(model, backend, base_url, adapter))
    overrides.pop("home", None)
    settings = _settings(overrides)
    spec = CurveSpec(task, arm_list, budget, eval_every, eval_episodes, repeats, overrides)
    chat = build_chat_model(settings)
    total = len(arm_list) * repeats * (budget // eval_every + 1)
    with EpisodeProgress(total, err, description=f"curve {task}") as progress:
        results = run_curve(spec, out_dir, chat, on_point=lambda run, point: progress.point_done(run.arm, point.rate))
    rows = summarise(results)
    if as_json:
        out.print_json(json.dumps(rows))
        return
    _print_curve(rows, out_dir)


def _print_curve(rows: list[dict], out_dir: Path) -> None:
    table = Table(title="dev success by arm")
    for col in ("arm", "after N train episodes", "success", "95% CI", "per repeat"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["arm"], str(r["train_episodes"]), f"{r['success_rate']:.1%}",
            f"{r['ci95'][0]:.0%}-{r['ci95'][1]:.0%}", ", ".join(f"{x:.0%}" for x in r["per_repeat"]),
        )
    out.print(table)
    out.print(f"plot: {out_dir / 'curve.png'}   table: {out_dir / 'table.md'}")


@experiment_app.command("report")
@friendly_errors
def experiment_report(
    results: list[Path] = typer.Argument(..., help="results.json files (or their folders)."),
    as_json: bool = JsonOpt,
) -> None:
    """Re-draw the plot and table of saved results."""
    from agent.experiment import load_results, summarise, write_report

    for path in results:
        path = path / "results.json" if path.is_dir() else path
        data = load_results(path)
        write_report(data, path.parent)
        rows = summarise(data)
        if as_json:
            out.print_json(json.dumps(rows))
        else:
            _print_curve(rows, path.parent)


from agent.cli_memory import memory_app  # noqa: E402
from agent.cli_rules import reflect, rules_app  # noqa: E402

from agent.cli_finetune import adapters_app, dataset_app, finetune_app  # noqa: E402

memory_app.add_typer(rules_app, name="rules")
app.add_typer(dataset_app, name="dataset")
app.add_typer(finetune_app, name="finetune")
app.add_typer(adapters_app, name="adapters")
app.command("reflect")(reflect)
app.add_typer(memory_app, name="memory")
