"""`crl runs`, `crl show` and `crl explain`: what past runs did, and why."""

from __future__ import annotations

import typer

from crl.agent.cli.common import Col, JsonOpt, command, effective_settings, emit, out

app = typer.Typer()

RUN_COLUMNS = [
    Col("run_id"),
    Col("kind", drop=2),
    Col("task"),
    Col("model", drop=4),
    Col("status", drop=3),
    Col("episodes", right=True, drop=1),
    Col("success_rate", "success", right=True, fmt=lambda r: f"{r:.0%}"),
]


@command(app)
def runs(as_json: bool = JsonOpt) -> None:
    """List runs with their outcome so far."""
    from crl.agent.runs import run_stores, summarise

    stores = run_stores(effective_settings())
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
    emit(rows, as_json, RUN_COLUMNS, title=f"runs in {stores[0].dir.parent}")


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
    episodes = store.episodes(run_id)
    if episode is not None:
        wanted = f"{run_id}-{episode:04d}"
        episodes = [e for e in episodes if e.episode_id == wanted]
        if not episodes:
            raise ValueError(f"run {run_id} has no episode {episode}")

    def render() -> None:
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
