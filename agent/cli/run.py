"""`crl run` and `crl eval`: play episodes with the agent, on train seeds or held-out ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from crl.agent.cli.common import (
    AdapterOpt,
    Backend,
    BackendOpt,
    BaseUrlOpt,
    Col,
    EpsilonOpt,
    Fold,
    JsonOpt,
    KFailureOpt,
    KSuccessOpt,
    MemoryMode,
    MemoryModeOpt,
    MemoryUrlOpt,
    ModelOpt,
    NoUtilityOpt,
    Policy,
    PolicyOpt,
    Rerank,
    RerankOpt,
    choices,
    command,
    effective_settings,
    emit,
    err,
    fitted_table,
    memory_flags,
    model_flags,
    out,
    overrides,
    pairs_table,
)
from crl.agent.cli.progress import EpisodeProgress

app = typer.Typer()
RetryMemory = choices("RetryMemory", ["attempts", "bank"])  # agent.retries.RETRY_MEMORY

ToolOpt = typer.Option(
    None,
    "--tool",
    help="Offer a tool: module:function or path/to/file.py:function (a typed function with a Google docstring). Repeatable.",
)
McpOpt = typer.Option(
    None,
    "--mcp",
    help='Offer an MCP server\'s tools: a command line ("python server.py") or an http(s) URL. Repeatable.',
)
ToolCalling = choices("ToolCalling", ["auto", "native", "react"])  # agent.tool_calling
ToolCallingOpt = typer.Option(
    None, "--tool-calling", help="How tools are called: auto (native where the backend supports it), native or react."
)


def tool_flags(tools: list[str] | None, mcp: list[str] | None, tool_calling: ToolCalling | None) -> dict[str, Any]:
    """The tool flags as settings overrides (the task's own tools are added by the run)."""
    return {"agent__tools": tools or None, "agent__mcp": mcp or None, "agent__tool_calling": tool_calling}


def report_view(report: dict[str, Any], title: str):
    """A run's report as a `key  value` table for people."""
    lo, hi = report["ci95"]
    rows = {
        "run": report["run_id"],
        "task": report["task"],
        "model": report["model"],
        "episodes": report["episodes"],
        "success rate": f"{report['success_rate']:.1%}  (95% CI {lo:.1%} – {hi:.1%})",
        "mean steps": f"{report['mean_steps']:.1f}",
        "invalid-action rate": f"{report['invalid_action_rate']:.1%}",
    }
    if report.get("errored"):
        reasons = "; ".join(f"{why} ({n})" for why, n in report.get("error_reasons", {}).items())
        rows["ended in an error"] = f"{report['errored']} (not counted as failures): {reasons}"
    if "memory_overrides" in report:
        win = report["override_win_rate"]
        rows["memory overrides"] = f"{report['memory_overrides']} of {report['scored_steps']} scored steps" + (
            f", episodes with one won {win:.0%}" if win is not None else ""
        )
    rows["throughput"] = f"{report['steps_per_s']:.2f} steps/s, {report['generated_tokens_per_s']:.1f} gen tok/s"
    rows["wall time"] = f"{report['wall_seconds']:.1f} s"
    return pairs_table(rows, title)


def exit_if_nothing_played(report: dict[str, Any]) -> None:
    """Exit 1 (after the report) when every episode ended in an error, so a script sees the run failed."""
    if report["episodes"] == 0 and report.get("errored"):
        reasons = "; ".join(report.get("error_reasons", {}))
        err.print(f"[bold red]error:[/] every episode ended in an error: {escape(reasons)}", highlight=False)
        raise typer.Exit(1)


@command(app)
def run(
    task: str = typer.Argument(..., help="Task name, e.g. keyroom/key (see `crl tasks`)."),
    episodes: int = typer.Option(10, "--episodes", "-n", min=1, help="Episodes to play."),
    parallel: int | None = typer.Option(None, "--parallel", "-k", min=1, help="Episodes played at once (batched)."),
    seed: int = typer.Option(0, "--seed", min=0, help="Offset into the task's train seeds."),
    max_steps: int | None = typer.Option(None, "--max-steps", min=1, help="Step limit per episode."),
    resume: str | None = typer.Option(None, "--resume", help="Continue an interrupted run by id."),
    no_memory: bool = typer.Option(False, "--no-memory", help="Do not store this run's experience in the bank."),
    no_reflect: bool = typer.Option(False, "--no-reflect", help="Do not distil rules every reflect.every episodes."),
    reflect_model: str | None = typer.Option(
        None, "--reflect-model", help="A (stronger) model that reflects; default: the acting model."
    ),
    finetune_auto: bool | None = typer.Option(
        None,
        "--finetune-auto/--no-finetune-auto",
        help="When the run ends, start a fine-tuning round (build, train, gate, promote) if enough new qualifying episodes arrived.",
    ),
    memory_url: str | None = MemoryUrlOpt,
    memory: MemoryMode | None = MemoryModeOpt,
    policy: Policy | None = PolicyOpt,
    k_success: int | None = KSuccessOpt,
    k_failure: int | None = KFailureOpt,
    epsilon: float | None = EpsilonOpt,
    no_utility: bool = NoUtilityOpt,
    rerank: Rerank | None = RerankOpt,
    model: str | None = ModelOpt,
    backend: Backend | None = BackendOpt,
    base_url: str | None = BaseUrlOpt,
    adapter: str | None = AdapterOpt,
    tool: list[str] | None = ToolOpt,
    mcp: list[str] | None = McpOpt,
    tool_calling: ToolCalling | None = ToolCallingOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Play episodes of a task with the agent and log every step."""
    from crl.agent.preflight import check_run_request, probe_store

    settings = effective_settings(
        overrides(
            agent__parallel=parallel,
            agent__max_steps=max_steps,
            memory__enabled=False if no_memory else None,
            memory__url=memory_url,
            reflect__enabled=False if no_reflect else None,
            reflect__model=reflect_model,
            finetune__auto_after_run=finetune_auto,
            **memory_flags(memory, policy, k_success, k_failure, epsilon, no_utility, rerank),
            **model_flags(model, backend, base_url, adapter),
            **tool_flags(tool, mcp, tool_calling),
        )
    )
    if not resume:
        check_run_request(episodes, seed)
    probe_store(settings)
    from crl.agent import app as crl

    if resume:
        store = crl.find_run(crl.run_stores(settings), resume)
        info = store.load(resume)
        total, task = len(info.seeds), info.task
        done = sum(1 for e in store.episodes(resume) if e.finished)
    else:
        crl.check_task(settings, task)
        total, done = episodes, 0
    with EpisodeProgress(total, err, initial=done, description=task) as progress:
        if resume:
            result = crl.resume_run(settings, resume, progress=progress)
        else:
            result = crl.start_run(settings, task, episodes, seed_start=seed, progress=progress)
    report = result.report()
    if settings.finetune.auto_after_run:
        from crl.agent.finetuning import round_if_due, round_message

        report["finetune_round"] = round_if_due(settings, progress=not as_json)
        if not as_json:
            err.print(round_message(report["finetune_round"]))
    emit(report, as_json, lambda: report_view(report, f"crl run {task}"))
    exit_if_nothing_played(report)


@command(app, "eval")
def evaluate(
    task: str = typer.Argument(..., help="Task name (see `crl tasks`)."),
    fold: Fold = typer.Option("dev", "--fold", help="Held-out seeds (train seeds are for collecting experience)."),
    episodes: int = typer.Option(20, "--episodes", "-n", min=1, help="Episodes to evaluate."),
    seed: int = typer.Option(
        0, "--seed", min=0, help="Offset into the fold's seeds (extend an evaluation without replaying it)."
    ),
    parallel: int | None = typer.Option(None, "--parallel", "-k", min=1, help="Episodes played at once (batched)."),
    max_steps: int | None = typer.Option(None, "--max-steps", min=1, help="Step limit per episode."),
    memory_url: str | None = MemoryUrlOpt,
    memory: MemoryMode | None = MemoryModeOpt,
    policy: Policy | None = PolicyOpt,
    k_success: int | None = KSuccessOpt,
    k_failure: int | None = KFailureOpt,
    epsilon: float | None = EpsilonOpt,
    no_utility: bool = NoUtilityOpt,
    rerank: Rerank | None = RerankOpt,
    model: str | None = ModelOpt,
    backend: Backend | None = BackendOpt,
    base_url: str | None = BaseUrlOpt,
    adapter: str | None = AdapterOpt,
    tool: list[str] | None = ToolOpt,
    mcp: list[str] | None = McpOpt,
    tool_calling: ToolCalling | None = ToolCallingOpt,
    attempts: int = typer.Option(
        1,
        "--attempts",
        min=1,
        help="Play each lost seed again, up to this many attempts in all; retries read a scratch copy of "
        "memory holding the earlier attempts (Reflexion's protocol). Reports success within all attempts.",
    ),
    first: str | None = typer.Option(
        None,
        "--first",
        help="With --attempts: take this finished evaluation (a run id of `crl runs`) as the first attempt "
        "instead of playing it; its seeds are the ones retried.",
    ),
    retry_memory: RetryMemory = typer.Option(
        "attempts",
        "--retry-memory",
        help="What retries read besides the earlier attempts: attempts (nothing else: this world's own tries "
        "are not outweighed by other worlds' counts; attempt 1 may play without memory) or bank (a scratch "
        "copy of memory as well).",
    ),
    resume: bool = typer.Option(
        False,
        "--resume",
        help="With --attempts and --first: continue the latest retries of that evaluation after an "
        "interruption (finished retries are kept, an interrupted one is resumed), or start them.",
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Success rate (with a 95% interval), mean steps and invalid-action rate on held-out seeds."""
    from crl.agent.preflight import probe_store

    settings = effective_settings(
        overrides(
            agent__parallel=parallel,
            agent__max_steps=max_steps,
            memory__url=memory_url,
            **memory_flags(memory, policy, k_success, k_failure, epsilon, no_utility, rerank),
            **model_flags(model, backend, base_url, adapter),
            **tool_flags(tool, mcp, tool_calling),
        )
    )
    # a first attempt read from its log, retried reading only the attempts, never opens the bank
    if not (first and retry_memory.value == "attempts"):
        probe_store(settings, "eval")
    from crl.agent import app as crl

    crl.check_task(settings, task)
    if first and attempts < 2:
        raise typer.BadParameter("--first names the first of several attempts: give --attempts 2 or more")
    if resume and not first:
        raise typer.BadParameter("--resume continues the retries of one evaluation: name it with --first")
    if attempts > 1:
        _evaluate_with_retries(
            settings, task, fold.value, episodes, seed, attempts, first, resume, retry_memory.value, as_json
        )
        return
    with EpisodeProgress(episodes, err, description=f"eval {task} [{fold.value}]") as progress:
        result = crl.start_run(
            settings, task, episodes, fold=fold.value, kind="eval", seed_start=seed, progress=progress
        )
    report = result.report() | {"fold": fold.value, "seed_offset": seed}
    emit(report, as_json, lambda: report_view(report, f"crl eval {task} ({fold.value} fold)"))
    exit_if_nothing_played(report)


def _evaluate_with_retries(
    settings,
    task: str,
    fold: str,
    episodes: int,
    seed: int,
    attempts: int,
    first: str | None,
    resume: bool,
    retry_memory: str,
    as_json: bool,
) -> None:
    from crl.agent.retries import evaluate_with_retries

    result = evaluate_with_retries(
        settings,
        task,
        episodes,
        attempts,
        fold=fold,
        seed_start=seed,
        progress=lambda k, n: EpisodeProgress(n, err, description=f"eval {task} [{fold}] attempt {k}"),
        first=first,
        resume=resume,
        retry_memory=retry_memory,
    )
    report = result.report() | {"fold": fold, "seed_offset": seed}

    def render() -> None:
        out.print(report_view(report, f"crl eval {task} ({fold} fold), attempt 1"))
        lo, hi = report["ci95_within"]
        rows = [
            {
                "attempt": r["attempt"],
                "run": r["run_id"],
                "played": r["episodes"],
                "won": r["successes"],
                "memory": "on" if r["memory"] else "off",
                "solved so far": f"{r['solved_so_far']}/{len(result.seeds)}",
            }
            for r in report["attempts"]
        ]
        out.print(fitted_table(rows, RETRY_COLUMNS, out.width, "attempts (each plays the seeds still unsolved)"))
        out.print(
            f"solved within {len(report['attempts'])} attempt(s): {report['solved_within']}/{len(result.seeds)} = "
            f"{report['success_rate_within']:.1%} (95% CI {lo:.1%} – {hi:.1%})"
        )
        scratch = report["scratch_home"]
        if scratch and (Path(scratch) / "memory").is_dir() and report["retry_memory"] == "attempts":
            out.print(
                f"retries read only the earlier attempts, stored in {escape(scratch)} "
                "(inspect with crl --home SCRATCH runs / explain; remove when done)",
                highlight=False,
            )
        elif scratch and (Path(scratch) / "memory").is_dir():
            out.print(
                f"retries read and learned into a scratch copy of memory: {escape(scratch)} "
                "(inspect with crl --home SCRATCH runs / explain; remove when done)",
                highlight=False,
            )
        elif scratch:
            out.print(f"retries logged under {escape(scratch)} (crl --home SCRATCH runs)", highlight=False)

    emit(report, as_json, render)
    exit_if_nothing_played(report)


RETRY_COLUMNS = [
    Col("attempt", right=True),
    Col("run"),
    Col("played", right=True),
    Col("won", right=True),
    Col("memory"),
    Col("solved so far", right=True),
]
