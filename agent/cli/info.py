"""`crl tasks` (with `add` and `rm` for JSONL tasks), `crl models` and `crl config`: what is available and what is in effect."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from typer.core import TyperGroup

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
    err,
    fitted_table,
    friendly_errors,
    model_flags,
    out,
    overrides,
)
from crl.agent.redaction import redact_text

app = typer.Typer()


class FamilyFirst(TyperGroup):
    """`crl tasks`: a first word that is not a subcommand is the family to list (`crl tasks keyroom`)."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        args = list(args)
        skip = False
        for i, arg in enumerate(args):
            if skip or arg.startswith("-"):
                skip = arg == "--family"
                continue
            if arg not in self.commands:
                args[i:i] = ["--family"]
            break
        return super().parse_args(ctx, args)


tasks_app = typer.Typer(cls=FamilyFirst, invoke_without_command=True)
app.add_typer(tasks_app, name="tasks", help="List the tasks; `crl tasks add` registers a JSONL task.")


def use_added_tasks() -> Path:
    """Point the task registry at this data directory's added tasks (again, after a change); return that file."""
    from crl.tasks.registrations import registrations_path

    return registrations_path(effective_settings().home)


def short_ref(ref: str) -> str:
    """A tool reference as people read it: a file's name instead of its whole path."""
    where, _, fn = ref.rpartition(":")
    return f"{Path(where).name}:{fn}" if where.endswith(".py") else ref


def warn_problems() -> None:
    """Print, on stderr, each added task or plugin that failed to load."""
    from crl.tasks.registry import task_problems

    for problem in task_problems():
        header, *rest = problem.splitlines()
        err.print(f"[yellow]warning:[/] {escape(header)}", highlight=False)
        for line in rest:
            err.print(line, highlight=False, markup=False)


def tasks(
    ctx: typer.Context,
    family: str | None = typer.Option(None, "--family", help="Only this family (also `crl tasks FAMILY`)."),
    long: bool = typer.Option(False, "--long", "-l", help="Add descriptions, seed ranges, sources and tools."),
    as_json: bool = JsonOpt,
) -> None:
    """List the tasks, their step limits and seed folds (`crl tasks keyroom --long`)."""
    if ctx.invoked_subcommand is not None:
        return
    from crl.tasks.base import FOLDS
    from crl.tasks.registry import list_tasks, task_origin

    use_added_tasks()
    warn_problems()
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
            "source": task_origin(s.name),
            "tools": list(s.tools),
        }
        for s in specs
    ]
    columns = [Col("name"), Col("max_steps", "steps", right=True)]
    if long:
        columns += [
            Col("seeds", "train / dev / test seeds", right=True, drop=2),
            Col("source", drop=1),
            Col("description", wrap=True),
        ]
    else:
        columns += [Col("sizes", "train/dev/test", right=True, drop=1)]
    shown = [
        r
        | {"seeds": f"{r['train']} / {r['dev']} / {r['test']}"}
        | ({"description": f"{r['description']}; tools: {', '.join(map(short_ref, r['tools']))}"} if r["tools"] else {})
        for r in rows
    ]
    caption = None if long else "--long adds descriptions, seed ranges and sources"
    emit(rows, as_json, lambda: fitted_table(shown, columns, out.width, f"tasks ({len(rows)})", caption))


tasks_app.callback()(friendly_errors(tasks))


@command(tasks_app, "add")
def tasks_add(
    items: Path = typer.Argument(..., help="JSONL file of items (prompt, answer; optional context, split, id, meta)."),
    checker: str = typer.Option(
        ..., "--checker", "-c", help="exact, normalised, regex, numeric, llm-judge, or module:function."
    ),
    name: str | None = typer.Option(None, "--name", help="Task name after jsonl/ (default: the file's stem)."),
    tools: list[str] = typer.Option(
        [], "--tool", "-t", help="Tool offered to the agent: module:function or file.py:function (repeatable)."
    ),
    max_steps: int | None = typer.Option(
        None, "--max-steps", min=1, help="Steps per episode: tool calls plus the final answer (default 6)."
    ),
    abs_tol: float | None = typer.Option(None, "--abs-tol", help="numeric: absolute tolerance (default 1e-6)."),
    rel_tol: float | None = typer.Option(None, "--rel-tol", help="numeric: relative tolerance (default 1e-6)."),
    search: bool = typer.Option(False, "--search", help="regex: the pattern may match anywhere, not the whole answer."),
    ignore_case: bool = typer.Option(False, "--ignore-case", help="regex: match case-insensitively."),
    description: str | None = typer.Option(None, "--description", help="One line for `crl tasks`."),
    replace: bool = typer.Option(False, "--replace", help="Overwrite a task already added under this name."),
    as_json: bool = JsonOpt,
) -> None:
    """Register a JSONL task as jsonl/NAME (kept in the data directory for later `crl run`)."""
    from crl.tasks.checkers import CheckerSpec
    from crl.tasks.jsonl_tasks import DEFAULT_MAX_STEPS, default_name, items_for
    from crl.tasks.registrations import add_registration

    options = {"abs_tol": abs_tol, "rel_tol": rel_tol, "fullmatch": False if search else None}
    options = {k: v for k, v in options.items() if v is not None} | ({"ignore_case": True} if ignore_case else {})
    spec_of_checker = CheckerSpec.parse(checker, **options)
    path = use_added_tasks()
    spec = add_registration(
        path,
        name or default_name(items),
        items,
        spec_of_checker,
        tuple(tools),
        max_steps or DEFAULT_MAX_STEPS,
        description,
        replace,
    )
    use_added_tasks()
    held = items_for(items, spec_of_checker)
    row = {
        "name": spec.name,
        "checker": spec_of_checker.label(),
        "items": f"{len(held)} ({held.sizes()} train/dev/test)",
        "tools": list(spec.tools),
        "max_steps": spec.max_steps,
        "registered_in": str(path),
    }
    emit(row, as_json, title=f"added {spec.name} (play it with `crl run {spec.name}`)")


@command(tasks_app, "rm")
def tasks_rm(
    name: str = typer.Argument(..., help="The added task, jsonl/NAME or NAME."),
    as_json: bool = JsonOpt,
) -> None:
    """Forget an added JSONL task (its items file and the runs that played it stay)."""
    from crl.tasks.registrations import remove_registration

    path = use_added_tasks()
    removed = remove_registration(path, name)
    use_added_tasks()
    row = {"name": f"jsonl/{name.removeprefix('jsonl/')}", "path": removed.path, "registered_in": str(path)}
    emit(row, as_json, title=f"removed {row['name']}")


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
    row = {
        "backend": choice.backend,
        "model": choice.model,
        "adapter": choice.adapter,
        "reason": redact_text(choice.reason),
    }
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
