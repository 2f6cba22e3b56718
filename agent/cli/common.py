"""What every `crl` command shares: consoles, global and shared options, settings, the error
wrapper, and `emit`, which prints a command's result as JSON (`--json`) or for people.

Only typer, rich and the light settings module are imported here; command modules import
their heavy library code inside the command, so `crl --help` answers at once.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from crl.agent.llm.base import LLMError
from crl.agent.redaction import guard_logging, redact_text
from crl.finetune.errors import FinetuneError
from crl.memory.errors import BankError
from crl.tasks.base import TaskError

if TYPE_CHECKING:
    from crl.agent.config import Settings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

out = Console()
err = Console(stderr=True)
guard_logging()

STATE: dict[str, Any] = {"config": None, "home": None, "namespace": None}

FIXABLE = (
    BankError,
    FinetuneError,
    TaskError,
    LLMError,
    ValueError,
    LookupError,
    ImportError,
    FileNotFoundError,
    FileExistsError,
    PermissionError,
    IsADirectoryError,
    NotADirectoryError,
    OSError,  # a read-only or full disk, a path whose parent is a file: the message names the path
)

STORE_ERROR_MODULES = ("chromadb", "sqlite3")
"""Errors raised inside the store (a full disk under Chroma's SQLite, a corrupted view): shown
as one line, not a traceback (the library code catches what it can act on)."""


# ---- choices --------------------------------------------------------------------------------
# The values are exactly those of the settings' `Literal` fields (a test holds them equal); they
# are spelled out here so that `--help` needs no settings import.


def choices(name: str, values: Sequence[str]) -> type[Enum]:
    """A str Enum whose members are `values` (member name = value), for a typer option with fixed choices."""
    return Enum(name, {v: v for v in values}, type=str)


Backend = choices("Backend", ["auto", "local", "openai"])  # llm.backend
MemoryMode = choices("MemoryMode", ["off", "cases", "steps", "full"])  # agent.memory
Policy = choices("Policy", ["llm", "memory", "mixed", "posterior", "random"])  # agent.policy
Rerank = choices("Rerank", ["default", "cross-encoder"])  # retrieval.rerank
RoundKind = choices("RoundKind", ["sft", "dpo", "sft+dpo"])  # finetune.auto_kind
Fold = choices("Fold", ["dev", "test"])
Similarity = choices("Similarity", ["lexical", "embedding"])  # synthesis.similarity
DatasetKind = choices("DatasetKind", ["sft", "dpo"])
LogLevel = choices("LogLevel", ["debug", "info", "warning", "error", "critical"])


def value(choice: Enum | None) -> str | None:
    """The string behind an enum choice (None stays None)."""
    return None if choice is None else choice.value


# ---- global options, settings ---------------------------------------------------------------


def global_options(
    config: Path | None = typer.Option(None, "--config", help="TOML config file (default ./crl.toml)."),
    home: Path | None = typer.Option(None, "--home", help="Data directory (default ./.crl, or $CRL_HOME)."),
    namespace: str | None = typer.Option(
        None,
        "--namespace",
        help="Memory namespace (a user, team or project) to read and write (default crl, or $CRL_MEMORY__NAMESPACE).",
    ),
    verbose: int = typer.Option(
        0, "--verbose", "-v", count=True, show_default=False, help="Log more: -v info, -vv debug."
    ),
    log_level: LogLevel | None = typer.Option(
        None, "--log-level", help="Log level (overrides -v).", case_sensitive=False
    ),
) -> None:
    """Global options shared by every command."""
    STATE["config"] = config
    STATE["home"] = home
    STATE["namespace"] = namespace
    configure_logging(verbose, value(log_level))


def configure_logging(verbose: int = 0, level: str | None = None) -> int | None:
    """Send log records to stderr at `level`, else INFO (-v) or DEBUG (-vv); returns the level set.

    Without either, logging is left as it is (Python prints warnings and errors to stderr).
    """
    if not verbose and not level:
        return None
    chosen = logging.getLevelName(level.upper()) if level else logging.DEBUG if verbose >= 2 else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    guard_logging(handler)
    logging.basicConfig(level=chosen, handlers=[handler], force=True)
    return chosen


def overrides(**flags: Any) -> dict[str, Any]:
    """Command-line flags as a nested settings dict (`section__key=value`); a flag given as None is not applied.

    Example: `overrides(agent__parallel=4, llm__model=None)` is `{"agent": {"parallel": 4}}`
    (plus `home` when `--home` was given).
    """
    nested: dict[str, Any] = {}
    if STATE["home"] is not None:
        nested["home"] = STATE["home"]
    if STATE.get("namespace") is not None:
        nested["memory"] = {"namespace": STATE["namespace"]}
    for dotted, given in flags.items():
        if given is None:
            continue
        if isinstance(given, Enum):
            given = given.value
        section, _, key = dotted.partition("__")
        if key:
            nested.setdefault(section, {})[key] = given
        else:
            nested[section] = given
    return nested


def effective_settings(flags: dict[str, Any] | None = None) -> Settings:
    """The effective settings: defaults < TOML file (`--config`) < environment < `flags` (from `overrides`).

    The task registry is pointed at the data directory's added tasks (`crl tasks add`), so every
    command that names a task finds them.
    """
    from crl.agent.config import load_settings
    from crl.agent.preflight import see_added_tasks

    settings = load_settings(overrides() if flags is None else flags, STATE["config"])
    see_added_tasks(settings)
    return settings


# ---- shared options -------------------------------------------------------------------------

JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON instead of tables.")
MemoryUrlOpt = typer.Option(None, "--memory-url", help="Chroma server shared by several processes (http://HOST:PORT).")
FamilyOpt = typer.Option(None, "--family", "-f", help="Task family, e.g. keyroom.")
YesOpt = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation.")
ModelOpt = typer.Option(None, "--model", help="Hub id, folder, .gguf file, or remote model name.")
BackendOpt = typer.Option(None, "--backend", help="auto: openai when --base-url is given, else local.")
BaseUrlOpt = typer.Option(None, "--base-url", help="OpenAI-compatible endpoint (implies --backend openai).")
AdapterOpt = typer.Option(
    None, "--adapter", help="LoRA adapter for a local model: its folder, or a registered id (crl adapters ls)."
)
MemoryModeOpt = typer.Option(None, "--memory", help="Memories in prompts (full adds rules).")
PolicyOpt = typer.Option(
    None,
    "--policy",
    help="Who acts: the model (llm), memory (episodic control), both (mixed thresholds, or the posterior over scored actions), or random (baseline).",
)
KSuccessOpt = typer.Option(None, "--k-success", min=0, help="Successful episodes shown per step.")
KFailureOpt = typer.Option(None, "--k-failure", min=0, help="Failed episodes shown per step (the contrast).")
EpsilonOpt = typer.Option(
    None, "--epsilon", min=0.0, max=1.0, help="Chance a memory slot goes to a novel, rarely used memory."
)
NoUtilityOpt = typer.Option(False, "--no-utility", help="Rank memories without their learned utility.")
RerankOpt = typer.Option(None, "--rerank", help="cross-encoder needs retrieval.cross_encoder_model.")


def model_flags(model: str | None, backend: Enum | None, base_url: str | None, adapter: str | None) -> dict[str, Any]:
    """The model options as `overrides` keywords."""
    return {"llm__model": model, "llm__backend": backend, "llm__base_url": base_url, "llm__adapter": adapter}


def memory_flags(memory, policy, k_success, k_failure, epsilon, no_utility: bool, rerank) -> dict[str, Any]:
    """The memory and retrieval options as `overrides` keywords."""
    return {
        "agent__memory": memory,
        "agent__policy": policy,
        "retrieval__k_success": k_success,
        "retrieval__k_failure": k_failure,
        "retrieval__epsilon": epsilon,
        "retrieval__use_utility": False if no_utility else None,
        "retrieval__rerank": rerank,
    }


# ---- errors ---------------------------------------------------------------------------------


def print_error(exc: BaseException) -> None:
    """An error as one red line; further lines of its message (e.g. each bad line of a file) follow as they are."""
    header, *details = redact_text(str(exc)).splitlines() or [type(exc).__name__]
    err.print(f"[bold red]error:[/] {escape(header)}", highlight=False)
    for line in details:
        err.print(line, highlight=False, markup=False)


def friendly_errors(fn: Callable) -> Callable:
    """Turn the errors a user can fix into one red line (exit 1) and Ctrl-C into a hint (exit 130)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except FIXABLE as exc:
            print_error(exc)
            raise typer.Exit(1) from None
        except Exception as exc:
            if not type(exc).__module__.startswith(STORE_ERROR_MODULES):
                raise
            print_error(RuntimeError(f"the memory store failed ({type(exc).__name__}): {exc}"))
            raise typer.Exit(1) from None
        except KeyboardInterrupt:
            err.print("[yellow]interrupted[/]: every finished step is in the run's log; continue with --resume RUN_ID")
            raise typer.Exit(130) from None

    return wrapper


def command(app: typer.Typer, name: str | None = None, **kwargs: Any) -> Callable:
    """Register `fn` as a command of `app` behind `friendly_errors`."""

    def register(fn: Callable) -> Callable:
        return app.command(name, **kwargs)(friendly_errors(fn))

    return register


# ---- output ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Col:
    """A table column over row dicts.

    Attributes:
        key: the row's key.
        header: the column title (default: the key).
        drop: 0 keeps the column always (ids and names a user types next: never cut or wrapped);
            above 0 it is optional, and the highest goes first when the terminal is too narrow.
        right: right-align (numbers).
        wrap: long cells wrap (free text) instead of widening the table.
        fmt: turns the row's value into the cell text (default `str`; None shows as `-`).
    """

    key: str
    header: str | None = None
    drop: int = 0
    right: bool = False
    wrap: bool = False
    fmt: Callable[[Any], str | Text] | None = None

    def cell(self, row: dict[str, Any]) -> Text:
        raw = row.get(self.key)
        shown = self.fmt(raw) if self.fmt is not None else ("-" if raw is None else str(raw))
        return shown if isinstance(shown, Text) else Text(shown)


WRAPPED_WIDTH = 24


def fitted_table(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[Col],
    width: int,
    title: str | None = None,
    caption: str | None = None,
) -> Table:
    """A table of `rows` that fits `width`: optional columns are left out (highest `drop` first)
    until the rest fits, and columns kept always are never shortened or wrapped.

    The caption names the columns left out, so a user knows to widen the terminal or use --json.
    """
    cells = [[c.cell(r) for c in columns] for r in rows]
    natural = [
        max([len(c.header or c.key)] + [cells[j][i].cell_len for j in range(len(rows))]) for i, c in enumerate(columns)
    ]
    need = [min(n, WRAPPED_WIDTH) if c.wrap else n for n, c in zip(natural, columns)]
    keep = set(range(len(columns)))
    for i in sorted((i for i, c in enumerate(columns) if c.drop), key=lambda i: -columns[i].drop):
        if sum(need[j] + 3 for j in keep) + 1 <= width:
            break
        keep.discard(i)
    hidden = [c.header or c.key for i, c in enumerate(columns) if i not in keep]
    notes = [caption] if caption else []
    if hidden:
        notes.append(f"hidden to fit the terminal: {', '.join(hidden)} (widen it, or use --json)")
    table = Table(
        title=Text(title) if title else None,
        title_justify="left",
        caption="\n".join(notes) or None,
        caption_justify="left",
    )
    for i, c in enumerate(columns):
        if i in keep:
            fixed = c.drop == 0 and not c.wrap
            table.add_column(
                c.header or c.key,
                justify="right" if c.right else "left",
                no_wrap=not c.wrap,
                overflow="fold" if c.wrap else "ellipsis",
                min_width=natural[i] if fixed else None,
            )
    for row in cells:
        table.add_row(*(cell for i, cell in enumerate(row) if i in keep))
    return table


def pairs_table(data: dict[str, Any], title: str | None = None) -> Table:
    """A two-column table of `key  value` lines (a record or a report for people)."""
    table = Table(title=Text(title) if title else None, show_header=False, title_justify="left")
    table.add_column(no_wrap=True)
    table.add_column()
    for key, shown in data.items():
        table.add_row(Text(str(key)), shown if isinstance(shown, Text) else Text(str(shown)))
    return table


View = Sequence[Col] | RenderableType | Callable[[], RenderableType | None] | None


def emit(data: Any, as_json: bool, view: View = None, title: str | None = None, caption: str | None = None) -> None:
    """Print a command's result: `data` as JSON with `--json`, else `view` for people.

    Args:
        data: what a script reads (JSON-serialisable; dates and paths become strings).
        as_json: the command's `--json` flag.
        view: how people see it: a list of `Col` (a table of `data`'s rows, fitted to the
            terminal), a rich renderable, a plain string (printed as is, without markup), or a
            function returning one (called only without `--json`; it may print itself and
            return None). None: a `key  value` table of a dict.
        title: the table's title (with `Col`s or the default view).
        caption: the table's caption (with `Col`s).

    Example: `emit(rows, as_json, [Col("run_id"), Col("model", drop=1)], title="runs")`.
    """
    if as_json:
        out.print_json(json.dumps(data, default=str))
        return
    if view is None:
        view = pairs_table(data, title)
    elif isinstance(view, (list, tuple)) and all(isinstance(c, Col) for c in view):
        view = fitted_table(data, view, out.width, title, caption)
    elif callable(view) and not isinstance(view, Table):
        view = view()
    if view is None:
        return
    if isinstance(view, str):
        out.print(view, highlight=False, markup=False, soft_wrap=True)
    else:
        out.print(view)


def say(message: str) -> None:
    """One plain line to stdout (no markup: ids and stored text may hold brackets; the terminal wraps it)."""
    out.print(message, highlight=False, markup=False, soft_wrap=True)


def confirm(action: str, yes: bool) -> None:
    """Ask before `action` (something that cannot be undone); refuse when nobody can answer."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise ValueError(f"refusing to {action} without confirmation (no terminal to ask on): pass --yes")
    if not typer.confirm(f"{action}?", default=False):
        err.print("nothing changed")
        raise typer.Exit(1)


@contextmanager
def open_bank(memory_url: str | None = None, settings: Settings | None = None) -> Iterator[Any]:
    """The bank of the configured data directory (or of `settings`), its warnings shown, closed
    (and its lock released) on exit."""
    from crl.agent.app import open_bank as open_

    bank = open_(settings or effective_settings(overrides(memory__url=memory_url)))
    try:
        for warning in bank.warnings:
            err.print(f"[yellow]note:[/] {escape(warning)}")
        yield bank
    finally:
        bank.close()


def hide_flag_types() -> None:
    """typer prints `<bool>` beside on/off flags (and `<int>` beside `-v`), which take no value: show nothing there."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "hides_flags", False):
        return

    def display_type_rich(self, ctx):
        return None if self.is_flag or self.count else shown(self, ctx)

    display_type_rich.hides_flags = True
    TyperOption.display_type_rich = display_type_rich


hide_flag_types()
