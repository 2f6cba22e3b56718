"""`crl tasks`, `crl models` and `crl config`: what is available and what is in effect."""

from __future__ import annotations

import typer

from crl.agent.cli.common import (
    STATE,
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
    fitted_table,
    model_flags,
    out,
    overrides,
)

app = typer.Typer()


@command(app)
def tasks(
    family: str | None = typer.Argument(None, help="Only this family (keyroom, twx, sciworld, tw)."),
    long: bool = typer.Option(False, "--long", "-l", help="Add descriptions and seed ranges."),
    as_json: bool = JsonOpt,
) -> None:
    """List the tasks, their step limits and seed folds."""
    from crl.tasks.base import FOLDS
    from crl.tasks.registry import list_tasks

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
    columns = [Col("name"), Col("max_steps", "steps", right=True)]
    if long:
        columns += [Col("seeds", "train / dev / test seeds", right=True, drop=1), Col("description", wrap=True)]
    else:
        columns += [Col("sizes", "train/dev/test", right=True, drop=1)]
    shown = [r | {"seeds": f"{r['train']} / {r['dev']} / {r['test']}"} for r in rows]
    caption = None if long else "--long adds descriptions and seed ranges"
    emit(rows, as_json, lambda: fitted_table(shown, columns, out.width, f"tasks ({len(rows)})", caption))


@command(app)
def models(
    model: str | None = ModelOpt,
    backend: Backend | None = BackendOpt,
    base_url: str | None = BaseUrlOpt,
    adapter: str | None = AdapterOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Which backend and model a command would use, and why."""
    from crl.agent.llm.factory import choose_model

    settings = effective_settings(overrides(**model_flags(model, backend, base_url, adapter)))
    choice = choose_model(settings.llm)
    row = {"backend": choice.backend, "model": choice.model, "adapter": choice.adapter, "reason": choice.reason}
    if choice.backend == "local" and settings.llm.model is None:
        row["cache"] = str(settings.models_dir)
    emit(row, as_json, title="model in effect")


CONFIG_COLUMNS = [
    Col("key"),
    Col("value", wrap=True, fmt=lambda v: repr(v) if v is None else str(v)),
    Col("source", wrap=True),
]


@command(app, "config")
def show_config(as_json: bool = JsonOpt) -> None:
    """The effective configuration and where each value came from (secrets masked)."""
    from crl.agent.config import explain_settings

    flags = overrides()
    settings = effective_settings(flags)
    rows = [{"key": k, "value": v, "source": s} for k, v, s in explain_settings(settings, flags, STATE["config"])]
    emit(rows, as_json, CONFIG_COLUMNS, title="configuration")
