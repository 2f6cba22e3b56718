"""`crl experiment`: learning curves, how much experience reuse helps."""

from __future__ import annotations

from pathlib import Path

import typer

from crl.agent.cli.common import (
    AdapterOpt,
    Backend,
    BackendOpt,
    BaseUrlOpt,
    Col,
    JsonOpt,
    ModelOpt,
    command,
    effective_settings,
    emit,
    err,
    fitted_table,
    model_flags,
    out,
    overrides,
)
from crl.agent.cli.progress import EpisodeProgress

app = typer.Typer(help="Learning curves: how much experience reuse helps.", no_args_is_help=True)

PAIR_COLUMNS = [
    Col("arms"),
    Col("after", right=True, drop=2),
    Col("a", right=True),
    Col("b", right=True),
    Col("discordant", drop=1),
    Col("McNemar p", right=True),
    Col("Fisher p", right=True, drop=3),
]
CURVE_COLUMNS = [
    Col("arm"),
    Col("train_episodes", "after N train episodes", right=True),
    Col("success_rate", "success", right=True, fmt=lambda r: f"{r:.1%}"),
    Col("ci95", "95% CI", right=True, drop=1, fmt=lambda ci: f"{ci[0]:.0%}-{ci[1]:.0%}"),
    Col("per_repeat", "per repeat", wrap=True, drop=2, fmt=lambda rates: ", ".join(f"{x:.0%}" for x in rates)),
]


def curve_view(rows: list[dict], out_dir: Path):
    """The dev success table of a learning curve, then where its plot and table files are."""

    def render() -> None:
        out.print(fitted_table(rows, CURVE_COLUMNS, out.width, "dev success by arm"))
        out.print(f"plot: {out_dir / 'curve.png'}   table: {out_dir / 'table.md'}", highlight=False)

    return render


def report_view(rows: list[dict], pairs: list[dict], out_dir: Path):
    """The curve table, then each pair of arms with its McNemar and Fisher p-values."""
    curve_table = curve_view(rows, out_dir)

    def p(value) -> str:
        return "" if value is None else f"{value:.3g}"

    def render() -> None:
        curve_table()
        if pairs:
            shown = [
                {
                    "arms": f"{r['arm_a']} vs {r['arm_b']}",
                    "after": r["train_episodes"],
                    "a": f"{r['a'][0]}/{r['a'][1]}",
                    "b": f"{r['b'][0]}/{r['b'][1]}",
                    "discordant": f"{r['a_only']} / {r['b_only']} of {r['pairs']}",
                    "McNemar p": p(r["mcnemar_p"]),
                    "Fisher p": p(r["fisher_p"]),
                }
                for r in pairs
            ]
            out.print(fitted_table(shown, PAIR_COLUMNS, out.width, "arms compared (two-sided exact tests)"))

    return render


@command(app, "curve")
def curve(
    task: str = typer.Argument(..., help="Task name (see `crl tasks`)."),
    arms: str = typer.Option(
        "random,none,memory,mixed",
        "--arms",
        help="Comma-separated: none, random, memory, memory+rules, mixed, mixed+rules, episodic.",
    ),
    budget: int = typer.Option(40, "--budget", help="Training episodes per arm and repeat."),
    eval_every: int = typer.Option(10, "--eval-every", help="Evaluate after every E training episodes."),
    eval_episodes: int = typer.Option(
        20, "--eval-episodes", help="Dev episodes per evaluation (the same seeds each time)."
    ),
    repeats: int = typer.Option(
        3, "--repeats", help="Repeats per arm (each with its own train seeds and fresh memory)."
    ),
    out_dir: Path = typer.Option(
        Path("experiments/curve"), "--out", help="Results folder (an interrupted experiment resumes)."
    ),
    parallel: int | None = typer.Option(None, "--parallel", "-k", help="Episodes played at once (batched)."),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Step limit per episode."),
    model: str | None = ModelOpt,
    backend: Backend | None = BackendOpt,
    base_url: str | None = BaseUrlOpt,
    adapter: str | None = AdapterOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Train each arm on train seeds and evaluate it on dev seeds every E episodes.

    Writes results.json, curve.png and table.md to --out.
    """
    from crl.agent.experiment import ARMS, CurveSpec, run_curve, summarise
    from crl.agent.llm.factory import build_chat_model

    arm_list = [a.strip() for a in arms.split(",") if a.strip()]
    unknown = [a for a in arm_list if a not in ARMS]
    if unknown:
        raise ValueError(f"unknown arm(s) {', '.join(unknown)}; arms: {', '.join(ARMS)}")
    if eval_every <= 0 or budget % eval_every:
        raise ValueError("--budget must be a positive multiple of --eval-every")
    flags = overrides(
        agent__parallel=parallel, agent__max_steps=max_steps, **model_flags(model, backend, base_url, adapter)
    )
    settings = effective_settings(flags)  # with --home, so that its added tasks (`crl tasks add`) are known
    flags.pop("home", None)
    spec = CurveSpec(task, arm_list, budget, eval_every, eval_episodes, repeats, flags)
    chat = build_chat_model(settings)
    total = len(arm_list) * repeats * (budget // eval_every + 1)
    with EpisodeProgress(total, err, description=f"curve {task}") as progress:
        results = run_curve(spec, out_dir, chat, on_point=lambda run, point: progress.point_done(run.arm, point.rate))
    rows = summarise(results)
    emit(rows, as_json, curve_view(rows, out_dir))


@command(app, "report")
def report(
    results: list[Path] = typer.Argument(..., help="results.json files (or their folders)."),
    merge_into: Path | None = typer.Option(
        None,
        "--merge-into",
        help="Skills experiments only: combine the given folders' arms and repeats (played apart, e.g. in "
        "parallel) into this folder's results.json and report them there.",
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Re-draw the plot and table of saved results (`crl experiment curve` or `skills`)."""
    import json

    from crl.agent.experiment import compare_arms, load_results, summarise, write_report
    from crl.agent.skills_experiment import is_skills_results, merge_results

    files = [path / "results.json" if path.is_dir() else path for path in results]
    for path in files:
        if not path.is_file():
            raise typer.BadParameter(f"{path} does not exist", param_hint="RESULTS")
    loaded = [(path, load_results(path)) for path in files]
    if merge_into is not None:
        merged = merge_results([(str(path), data) for path, data in loaded])
        merge_into.mkdir(parents=True, exist_ok=True)
        target = merge_into / "results.json"
        if target.exists() and target.resolve() not in {p.resolve() for p in files}:
            raise typer.BadParameter(f"{target} exists and is not among the results merged", param_hint="--merge-into")
        target.write_text(json.dumps(merged, indent=1))
        loaded = [(target, merged)]
    for path, data in loaded:
        if is_skills_results(data):
            show_skills(data, path.parent, as_json)
            continue
        write_report(data, path.parent)
        rows, pairs = summarise(data), compare_arms(data)
        emit({"curve": rows, "comparisons": pairs}, as_json, report_view(rows, pairs, path.parent))


def show_skills(data: dict, out_dir: Path, as_json: bool) -> None:
    """Write a skills experiment's report next to its results and show its dev points."""
    from crl.agent.skills_report import summarise, write_report

    write_report(data, out_dir)
    rows = summarise(data)
    emit(rows, as_json, skills_view(rows, out_dir))


SKILLS_COLUMNS = [
    Col("arm"),
    Col("stage", drop=2),
    Col("env_steps", "env steps", right=True, fmt=lambda x: f"{x:.0f}"),
    Col("success_rate", "dev success", right=True, fmt=lambda r: f"{r:.1%}"),
    Col("ci95", "95% CI", right=True, drop=1, fmt=lambda ci: f"{ci[0]:.0%}-{ci[1]:.0%}"),
    Col("per_repeat", "per repeat", wrap=True, drop=3, fmt=lambda rates: ", ".join(f"{x:.0%}" for x in rates)),
]


@command(app, "skills")
def skills(
    task: str = typer.Argument(
        "keyroom/compound", help="A compound task with declared sub-goals, or one whose sub-goals are score points."
    ),
    arms: str = typer.Option(
        "drrn,none,skills,skills+sft", "--arms", help="Comma-separated: drrn, none, skills, skills+sft."
    ),
    phase1: int = typer.Option(8, "--phase1", help="Phase 1: training episodes of each sub-task (or worlds)."),
    attempts: int = typer.Option(
        4, "--attempts", help="Phase 1 of a task without sub-tasks: attempts on each of its --phase1 worlds."
    ),
    retries: int = typer.Option(
        0,
        "--phase1-retries",
        help="Phase 1: play each (sub-)task's worlds no attempt solved again, up to this many more times (charged).",
    ),
    budget: int = typer.Option(8, "--budget", help="Phase 2: compound training episodes (skills arms)."),
    eval_episodes: int = typer.Option(16, "--eval-episodes", help="Dev seeds per evaluation (the same for every arm)."),
    test_episodes: int = typer.Option(16, "--test-episodes", help="Test seeds for each arm's final point (0: none)."),
    repeats: int = typer.Option(3, "--repeats", help="Repeats per arm (each with its own train seeds and memory)."),
    first_repeat: int = typer.Option(
        0,
        "--first-repeat",
        help="Play repeats from this one (0-based) on, leaving earlier ones to another --out folder "
        "(combine them with `crl experiment report --merge-into`).",
    ),
    drrn_steps: int = typer.Option(12_000, "--drrn-steps", help="The from-scratch learner's environment steps."),
    drrn_eval_every: int = typer.Option(2_000, "--drrn-eval-every", help="Its evaluation interval, in steps."),
    sft_epochs: int = typer.Option(3, "--sft-epochs", help="Epochs of the skills+sft arm's SFT round."),
    sft_max_steps: int = typer.Option(-1, "--sft-max-steps", help="Cap on its optimizer steps (-1: none)."),
    sft_rounds: int = typer.Option(
        1,
        "--sft-rounds",
        help="SFT rounds of the skills+sft arm; each after the first plays --collect compound episodes "
        "with the last adapter and memory first.",
    ),
    collect: int = typer.Option(
        0, "--collect", help="Compound episodes played before each SFT round after the first (0: --budget)."
    ),
    continue_rounds: bool = typer.Option(
        False,
        "--continue-rounds",
        help="SFT rounds after the first continue the last adapter for --round-steps steps on the compound "
        "task's wins instead of training from the base model.",
    ),
    round_steps: int = typer.Option(24, "--round-steps", help="Optimizer steps of each continued round."),
    align: int = typer.Option(
        0,
        "--align",
        help="Compound training episodes each new adapter plays with memory (stored) before its "
        "evaluation with memory (0: none).",
    ),
    out_dir: Path = typer.Option(
        Path("experiments/skills"),
        "--out",
        help="Results folder: an interrupted experiment resumes; run again with more --arms or --repeats to extend it.",
    ),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Step limit per agent episode."),
    parallel: int | None = typer.Option(None, "--parallel", "-k", help="Episodes played at once (batched)."),
    model: str | None = ModelOpt,
    backend: Backend | None = BackendOpt,
    base_url: str | None = BaseUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """The seed's section-5 experiment: sub-skills then stitching against a from-scratch DRRN.

    Every arm is charged for every environment step it learned from (phase 1, replay, compound
    training). Writes results.json, curve.png and table.md to --out.
    """
    from crl.agent.skills_experiment import ARMS, SkillsExperiment, SkillsSpec, stages
    from crl.agent.skills_report import summarise

    arm_list = [a.strip() for a in arms.split(",") if a.strip()]
    flags = overrides(
        agent__parallel=parallel, agent__max_steps=max_steps, **model_flags(model, backend, base_url, None)
    )
    flags.pop("home", None)
    spec = SkillsSpec(
        task=task,
        arms=arm_list,
        phase1=phase1,
        budget=budget,
        eval_episodes=eval_episodes,
        test_episodes=test_episodes,
        repeats=repeats,
        drrn_steps=drrn_steps,
        drrn_eval_every=drrn_eval_every,
        sft_epochs=sft_epochs,
        sft_max_steps=sft_max_steps,
        sft_rounds=sft_rounds,
        overrides=flags,
        attempts=attempts,
        align=align,
        collect=collect,
        continue_rounds=continue_rounds,
        round_steps=round_steps,
        retries=retries,
    )
    experiment = SkillsExperiment(spec, out_dir, first_repeat=first_repeat)
    played = repeats - first_repeat
    total = sum(stages(spec, a) * (int(first_repeat == 0) if a == "none" else played) for a in arm_list if a in ARMS)
    with EpisodeProgress(total, err, initial=experiment.kept_points(), description=f"skills {task}") as progress:
        experiment.on_point = lambda run, point: progress.point_done(run.arm, point.rate)
        results = experiment.run()
    rows = summarise(results)
    emit(rows, as_json, skills_view(rows, out_dir))


def skills_view(rows: list[dict], out_dir: Path):
    """The skills experiment's dev points, then where its report is."""

    def render() -> None:
        out.print(fitted_table(rows, SKILLS_COLUMNS, out.width, "dev success against environment steps learned from"))
        out.print(f"plot: {out_dir / 'curve.png'}   table: {out_dir / 'table.md'}", highlight=False)

    return render
