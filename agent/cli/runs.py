"""`crl runs`, `crl show`, `crl explain` and `crl compare`: what past runs did, why, and how runs on the same seeds differ."""

from __future__ import annotations

import time

import typer
from rich.text import Text

from crl.agent.cli.common import Col, JsonOpt, command, effective_settings, emit, err, fitted_table, out

app = typer.Typer()


def ago(seconds: float | None) -> str:
    """How long ago, for people: `12 s`, `5 min`, `3 h`, `2 d` (- when unknown)."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


RUN_COLUMNS = [
    Col("run_id"),
    Col("namespace"),
    Col("kind", drop=3),
    Col("task"),
    Col("model", drop=4),
    Col("status", drop=2, fmt=lambda s: Text(s, style="yellow") if s == "interrupted" else Text(s)),
    Col("episodes", right=True, drop=1),
    Col("success_rate", "success", right=True, fmt=lambda r: f"{r:.0%}"),
    Col("last_active", "last active", right=True, drop=5, fmt=lambda t: ago(None if t is None else time.time() - t)),
]


def run_namespace_of(info, primary: str) -> str:
    """The namespace a run learns into (a run that records none: the home's first namespace)."""
    return info.namespace or primary


@command(app)
def runs(
    all_namespaces: bool = typer.Option(
        False, "--all-namespaces", "-A", help="Runs of every memory namespace of the home, with a namespace column."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """List runs (of this memory namespace) with their outcome so far; a run whose process died is "interrupted"."""
    from crl.agent.runs import run_stores, summarise
    from crl.memory.storage.namespaces import DEFAULT, primary_namespace

    settings = effective_settings()
    stores = run_stores(settings)
    primary = primary_namespace(settings.memory_dir) or DEFAULT
    rows = []
    elsewhere = 0
    for store, info in sorted(((s, i) for s in stores for i in s.list()), key=lambda si: si[1].run_id):
        namespace = run_namespace_of(info, primary)
        if not all_namespaces and namespace != settings.memory.namespace:
            elsewhere += 1
            continue
        s = summarise(store.episodes(info.run_id))
        rows.append(
            {
                "run_id": info.run_id,
                "namespace": namespace,
                "kind": info.kind,
                "task": info.task,
                "model": info.model,
                "status": info.status,
                "episodes": f"{s.finished}/{len(info.seeds)}",
                "success_rate": s.success_rate,
                "pid": info.pid,
                "host": info.host,
                "last_active": store.last_active(info.run_id),
            }
        )
    columns = [c for c in RUN_COLUMNS if all_namespaces or c.key != "namespace"]  # shown whole when listed
    where = "every namespace" if all_namespaces else f"namespace {settings.memory.namespace}"
    hint = f"{elsewhere} run(s) of other namespaces: --all-namespaces lists them" if elsewhere else None
    emit(rows, as_json, columns, title=f"runs in {stores[0].dir.parent} ({where})", caption=hint)


def run_status_line(store, info) -> Text:
    """One line on a run for people: task, status (why it is interrupted), writer and heartbeat."""
    line = Text.assemble(("run ", "bold"), (info.run_id, "bold"), f" · {info.kind} {info.task} · ")
    line.append(info.status, style="yellow" if info.status == "interrupted" else "")
    if info.pid is not None:
        line.append(f" · pid {info.pid} on {info.host}")
    if info.status == "interrupted":
        line.append(f" (its process is gone; continue with `crl run --resume {info.run_id}`)", style="yellow")
    last = store.last_active(info.run_id)
    if last is not None:
        line.append(f" · last active {ago(time.time() - last)} ago")
    return line


@command(app)
def show(
    run_id: str = typer.Argument(..., help="Run id (see `crl runs`)."),
    episode: int | None = typer.Argument(None, help="Episode number within the run; all when omitted."),
    as_json: bool = JsonOpt,
) -> None:
    """Pretty-print a run's trajectories: observation, thought, action, reward."""
    from crl.agent.render import render_episode
    from crl.agent.runs import find_run, run_stores

    store = find_run(run_stores(effective_settings()), run_id)
    info = store.load(run_id)
    episodes = store.episodes(run_id)
    if episode is not None:
        wanted = f"{run_id}-{episode:04d}"
        episodes = [e for e in episodes if e.episode_id == wanted]
        if not episodes:
            raise ValueError(f"run {run_id} has no episode {episode}")

    def render() -> None:
        out.print(run_status_line(store, info), highlight=False)
        for e in episodes:
            render_episode(out, e)

    emit([e.to_dict() for e in episodes] if as_json else None, as_json, render)


@command(app)
def explain(
    run_id: str = typer.Argument(..., help="Run id (see `crl runs`)."),
    episode: int = typer.Argument(..., help="Episode number within the run."),
    step: int | None = typer.Argument(None, help="One step only."),
    as_json: bool = JsonOpt,
) -> None:
    """What memory offered at each step, why (score breakdown), and what the agent then did."""
    from crl.agent.explain import explain_step, render_explanation
    from crl.agent.runs import find_run, run_stores

    store = find_run(run_stores(effective_settings()), run_id)
    wanted = f"{run_id}-{episode:04d}"
    found = [e for e in store.episodes(run_id) if e.episode_id == wanted]
    if not found:
        raise ValueError(f"run {run_id} has no episode {episode}")
    ep = found[0]
    if step is not None and not any(s.index == step for s in ep.steps):
        raise ValueError(f"episode {episode} has no step {step} (it has {len(ep.steps)})")
    data = [explain_step(s) for s in ep.steps if step is None or s.index == step] if as_json else None
    emit(data, as_json, lambda: render_explanation(out, ep, step))


def load_compared_run(ref: str):
    """`LABEL=RUN[,RUN...]` or `RUN[,RUN...]` as one `RunOutcomes` (several runs pool as repeats). A
    RUN is a run id of this home (`crl runs`), or the folder of a run in any home
    (`OTHER/.crl/evals/RUN_ID`)."""
    from crl.agent.run_compare import pooled

    label, sep, targets = ref.partition("=")
    if not sep or "/" in label:
        label, targets = "", ref
    names = [t.strip() for t in targets.split(",")]
    if not all(names):
        raise ValueError(f"{ref!r} names no run: give run ids (see `crl runs`) or runs' folders, comma-separated")
    runs = [_compared_run(name) for name in names]
    return pooled(label or ",".join(r.run_ids[0] for r in runs), runs)


def identify_games(runs) -> None:
    """Fill in the game of every seed the runs' episodes did not log one for, by resetting the
    task's environment on it (`crl.tasks.game_identity`); says so when the task cannot tell."""
    from rich.progress import Progress

    from crl.agent.run_compare import check_same_task, fill_games
    from crl.tasks.game_identity import game_at
    from crl.tasks.registry import make_env

    check_same_task(runs)
    missing = {k[1] for r in runs for k in set(r.outcomes) - set(r.games)}
    env = make_env(runs[0].task)
    try:
        with Progress(console=err, transient=True) as bar:
            task = bar.add_task("identifying games", total=len(missing))

            def identify(seed: int) -> str | None:
                bar.advance(task)
                return game_at(env, seed)

            filled = fill_games(runs, identify)
    finally:
        env.close()
    if missing and not filled:
        err.print(f"[yellow]{runs[0].task} cannot say which game a seed starts: every seed counts as its own game[/]")


def _compared_run(target: str):
    from pathlib import Path

    from crl.agent.run_compare import stored_run_outcomes
    from crl.agent.runs import RUN_FILE, RunStore, find_run, run_stores

    folder = Path(target).expanduser()
    if (folder / RUN_FILE).is_file():
        store, run_id = RunStore(folder.resolve().parent), folder.resolve().name
    elif "/" in target or folder.exists():
        raise FileNotFoundError(f"{target} is not a run's folder (it has no {RUN_FILE})")
    else:
        store, run_id = find_run(run_stores(effective_settings()), target), target
    return stored_run_outcomes(store, run_id)


def _rate(row: dict) -> str:
    lo, hi = row["ci95"]
    return f"{row['success_rate']:.0%} ({lo:.0%}-{hi:.0%})"


def _p(p: float | None) -> str:
    return "-" if p is None else f"{p:.3g}"


COMPARED_RUN_COLUMNS = [
    Col("label"),
    Col("seeds", right=True),
    Col("successes", "won", right=True),
    Col("success", "success (95%)", right=True),
    Col("mean_points", "mean points", right=True, drop=2, fmt=lambda m: f"{m:.2f}"),
    Col("model", drop=3),
    Col("run_id", "run", drop=1),
]


def pair_columns(prefix: str = "", counted: str = "seeds") -> list[Col]:
    """The paired table's columns: on seeds, or with prefix "games_" on distinct games."""
    return [
        Col("a"),
        Col("b"),
        Col(counted, f"paired {counted}", right=True),
        Col(f"{prefix}a_only", "only a won", right=True),
        Col(f"{prefix}b_only", "only b won", right=True),
        Col(f"{prefix}p_two_sided", "McNemar p", right=True, fmt=_p),
        Col(f"{prefix}p_a_better", "p (a better)", right=True, drop=1, fmt=_p),
    ]


@command(app)
def compare(
    runs: list[str] = typer.Argument(
        ...,
        help="Two or more runs: a run id (see `crl runs`) or a run's folder, optionally named LABEL=RUN; "
        "LABEL=RUN,RUN,... pools a setting's repeats (paired in order with another label's).",
    ),
    all_pairs: bool = typer.Option(False, "--all-pairs", help="Test every pair, not only each run against the first."),
    games: bool = typer.Option(
        False,
        "--games",
        help="Learn which seeds start the same game by starting the task's environment on each seed "
        "(for runs logged before episodes recorded their game).",
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Runs played on the same seeds, seed by seed: success with a 95% interval, and paired McNemar tests
    (also on distinct games, where seeds repeat a game)."""
    from rich.console import Group

    from crl.agent.run_compare import compare_runs

    loaded = [load_compared_run(ref) for ref in runs]
    if games:
        identify_games(loaded)
    result = compare_runs(loaded, all_pairs=all_pairs)

    def render():
        rows = [r | {"success": _rate(r)} for r in result["runs"]]
        left_out = [
            f"{r['label']}: {r['errored']} errored and {r['unfinished']} unfinished episodes left out"
            for r in result["runs"]
            if r["errored"] or r["unfinished"]
        ]
        unpaired = [f"{p['a']} and {p['b']} share no seed" for p in result["pairs"] if not p["seeds"]]
        columns = COMPARED_RUN_COLUMNS
        if any(r["games"] < r["seeds"] for r in rows):
            columns = [*columns[:2], Col("games", "distinct games", right=True, drop=2), *columns[2:]]
        runs_table = fitted_table(rows, columns, out.width, f"{result['task']}: runs", "; ".join(left_out) or None)
        pairs_title = "paired on the seeds both finished"
        pairs = fitted_table(result["pairs"], pair_columns(), out.width, pairs_title, "; ".join(unpaired) or None)
        repeated = [p for p in result["pairs"] if p["games"] < p["seeds"]]
        if not repeated:
            return Group(runs_table, pairs)
        note = (
            f"{repeated[0]['seeds'] - repeated[0]['games']} of {repeated[0]['a']} and {repeated[0]['b']}'s paired "
            "seeds start a game a lower seed already started; each game counts once here (its lowest seed)"
        )
        games = fitted_table(
            result["pairs"], pair_columns("games_", "games"), out.width, "paired on distinct games", note
        )
        return Group(runs_table, pairs, games)

    emit(result, as_json, render)
