"""`crl memory`: inspect and curate the experience bank, one thin command per `ExperienceBank` method.

Every command opens the bank of the data directory (embedded, or the Chroma server given
by `--memory-url`), does one thing, and closes it. Listings are rich tables; `--json`
prints what a script may read.

Helpers shared with the main CLI (`friendly_errors`, `_settings`, `_overrides`, the
consoles) are imported from `agent.cli` when a command runs, not when this module loads:
`agent.cli` imports this module to register the group, so a load-time import would be
circular.
"""

from __future__ import annotations

import functools
import json
import sys
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterator, List, Literal, Optional

import typer
from rich.markup import escape

from agent import render_memory as view

memory_app = typer.Typer(help="Inspect and curate the experience bank.", no_args_is_help=True)

JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON instead of tables.")
MemoryUrlOpt = typer.Option(None, "--memory-url", help="Chroma server shared by several processes (http://HOST:PORT).")
FamilyOpt = typer.Option(None, "--family", "-f", help="Task family, e.g. keyroom.")
IdsArg = typer.Argument(..., help="Record ids: an episode id or any unique prefix, or a full ep:/st:/ru: id.")
YesOpt = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation.")

SORT_KEYS = {"value": "value", "recent": "recency", "use": "use", "utility": "utility", "last-used": "last_used"}


def _cli():
    import agent.cli

    return agent.cli


def _memory_errors(fn):
    """Errors of memory commands that `friendly_errors` does not know: bad import files (every
    bad line shown), run logs missing during a replay, and files that cannot be written."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from memory.apply import MissingContentError
        from memory.transfer import ImportValidationError

        err = _cli().err
        try:
            return fn(*args, **kwargs)
        except ImportValidationError as exc:
            header, *lines = str(exc).splitlines()
            err.print(f"[bold red]error:[/] {escape(header)}", highlight=False)
            for line in lines:
                err.print(line, highlight=False, markup=False)
            raise typer.Exit(1)
        except (MissingContentError, IsADirectoryError, NotADirectoryError) as exc:
            err.print(f"[bold red]error:[/] {escape(str(exc))}")
            raise typer.Exit(1)

    return wrapper


def command(name: str | None = None):
    """Register a `crl memory` command whose fixable errors print one red line and exit 1."""

    def register(fn):
        @functools.wraps(fn)
        def guarded(*args, **kwargs):
            return _cli().friendly_errors(_memory_errors(fn))(*args, **kwargs)

        return memory_app.command(name)(guarded)

    return register


@contextmanager
def _bank(memory_url: str | None, settings: Any = None) -> Iterator[Any]:
    """The bank of the configured data directory (or of `settings`), closed (and its lock
    released) on exit."""
    from agent import app as crl

    cli = _cli()
    settings = settings or cli._settings(cli._overrides(memory__url=memory_url))
    bank = crl.open_bank(settings)
    try:
        for warning in bank.warnings:
            cli.err.print(f"[yellow]note:[/] {escape(warning)}")
        yield bank
    finally:
        bank.close()


def _print_json(data: Any) -> None:
    _cli().out.print_json(json.dumps(data, default=str))


def _say(message: str) -> None:
    _cli().out.print(message, highlight=False, markup=False)


def _record_json(record: Any, with_trajectory: bool = True) -> dict[str, Any]:
    exclude = None if with_trajectory or record.kind != "episode" else {"trajectory"}
    return record.model_dump(mode="json", exclude=exclude)


def _confirm(action: str, yes: bool) -> None:
    """Ask before `action` (something that cannot be undone); refuse when nobody can answer."""
    if yes:
        return
    if not sys.stdin.isatty():
        raise ValueError(f"refusing to {action} without confirmation (no terminal to ask on): pass --yes")
    if not typer.confirm(f"{action}?", default=False):
        _cli().err.print("nothing changed")
        raise typer.Exit(1)


@command("ls")
def ls(
    family: Optional[str] = FamilyOpt,
    variant: Optional[str] = typer.Option(None, "--variant", help="Task variant, e.g. key (of keyroom/key)."),
    success: Optional[bool] = typer.Option(None, "--success/--failure", help="Only successful (or failed) episodes."),
    tier: Optional[Literal["golden", "regular", "quarantine"]] = typer.Option(None, "--tier"),
    source: Optional[Literal["real", "synthetic"]] = typer.Option(None, "--source"),
    skill: Optional[str] = typer.Option(None, "--skill", help="Only records that reached this sub-goal, e.g. key."),
    tag: Optional[str] = typer.Option(None, "--tag", help="Only records with this user label."),
    sort: Literal["recent", "value", "use", "utility", "last-used"] = typer.Option("recent", "--sort"),
    limit: int = typer.Option(50, "--limit", "-n", help="Most rows shown (0: all)."),
    kind: Literal["episode", "step", "rule"] = typer.Option("episode", "--kind"),
    memory_url: Optional[str] = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """List episodes (or steps, rules) with outcome, return, value, utility, uses and tier."""
    outcome = None if success is None else ("success" if success else "failure")
    with _bank(memory_url) as bank:
        records = bank.ls(kind, family=family, variant=variant, outcome=outcome, tier=tier, source=source,
                          skill=skill, tag=tag, sort=SORT_KEYS[sort])
    shown = records[:limit] if limit > 0 else records
    if as_json:
        _print_json([_record_json(r, with_trajectory=False) for r in shown])
        return
    if not records:
        _say(f"no {kind}s match; `crl run TASK` stores experience, `crl memory stats` shows what the bank holds")
        return
    title = f"{len(shown)} of {len(records)} {kind}s, by {sort}" if len(shown) < len(records) else f"{len(records)} {kind}s, by {sort}"
    out = _cli().out
    out.print(view.records_table(shown, kind, title, width=out.width))
    if len(shown) < len(records):
        out.print(f"[dim]{len(records) - len(shown)} more: --limit 0 shows all[/]")


@command("show")
def show(
    record_id: str = typer.Argument(..., help="An episode id (or unique prefix), or a full ep:/st:/ru: record id."),
    memory_url: Optional[str] = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Show one record in full: an episode's tags and its whole trajectory."""
    with _bank(memory_url) as bank:
        record = bank.get(record_id)
    if as_json:
        _print_json(_record_json(record))
    else:
        view.render_record(_cli().out, record)


@command("search")
def search(
    text: str = typer.Argument(..., help="What to look for, e.g. 'a locked door and a key on the floor'."),
    k: int = typer.Option(10, "-k", help="How many results."),
    family: Optional[str] = FamilyOpt,
    kind: Literal["all", "episode", "step"] = typer.Option("all", "--kind", help="Search episodes, steps or both."),
    include_quarantine: bool = typer.Option(False, "--include-quarantine", help="Search quarantined records too."),
    memory_url: Optional[str] = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Semantic search over stored episodes and steps, with cosine similarity scores."""
    if k < 1:
        raise ValueError("-k must be at least 1")
    kinds = ("episode", "step") if kind == "all" else (kind,)
    with _bank(memory_url) as bank:
        hits = bank.search(text, k=k, family=family, kinds=kinds, include_quarantine=include_quarantine)
    if as_json:
        _print_json([{"id": h.id, "similarity": h.similarity, "record": _record_json(h.record, False)} for h in hits])
        return
    if not hits:
        _say("nothing found" + (f" in family {family!r}" if family else "") + "; `crl memory stats` shows what the bank holds")
        return
    out = _cli().out
    out.print(view.search_table(hits, text, width=out.width))


def _curate(memory_url: str | None, as_json: bool, action: str, do) -> None:
    with _bank(memory_url) as bank:
        ids = do(bank)
    if as_json:
        _print_json({"action": action, "ids": ids})
    else:
        _say(f"{action} {len(ids)} record(s): {', '.join(ids)}")


TagsOpt = typer.Option(..., "--tag", "-t", help="A label (repeat for several).")


@command("tag")
def tag(ids: List[str] = IdsArg, tags: List[str] = TagsOpt, memory_url: Optional[str] = MemoryUrlOpt,
        as_json: bool = JsonOpt) -> None:
    """Add labels to records (`ls --tag` finds them again)."""
    _curate(memory_url, as_json, f"tagged ({', '.join(tags)})", lambda bank: bank.tag(ids, tags))


@command("untag")
def untag(ids: List[str] = IdsArg, tags: List[str] = TagsOpt, memory_url: Optional[str] = MemoryUrlOpt,
          as_json: bool = JsonOpt) -> None:
    """Remove labels from records."""
    _curate(memory_url, as_json, f"untagged ({', '.join(tags)})", lambda bank: bank.untag(ids, tags))


@command("pin")
def pin(ids: List[str] = IdsArg, memory_url: Optional[str] = MemoryUrlOpt, as_json: bool = JsonOpt) -> None:
    """Move records to the golden tier: never evicted."""
    _curate(memory_url, as_json, "pinned (golden)", lambda bank: bank.pin(ids))


@command("quarantine")
def quarantine(ids: List[str] = IdsArg, memory_url: Optional[str] = MemoryUrlOpt, as_json: bool = JsonOpt) -> None:
    """Keep records out of retrieval and fine-tuning data (they stay until removed)."""
    _curate(memory_url, as_json, "quarantined", lambda bank: bank.quarantine(ids))


@command("release")
def release(ids: List[str] = IdsArg, memory_url: Optional[str] = MemoryUrlOpt, as_json: bool = JsonOpt) -> None:
    """Return records to the regular tier (from golden or quarantine)."""
    _curate(memory_url, as_json, "released (regular)", lambda bank: bank.release(ids))


@command("rm")
def rm(
    ids: List[str] = IdsArg,
    reason: str = typer.Option("removed by user", "--reason", help="Why (kept in the journal)."),
    yes: bool = YesOpt,
    memory_url: Optional[str] = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Delete records (an episode with its steps); a later sync will not bring them back."""
    with _bank(memory_url) as bank:
        resolved = list(dict.fromkeys(bank.resolve(i) for i in ids))
        if not yes:
            _cli().err.print("will remove: " + ", ".join(resolved), highlight=False, markup=False)
        _confirm(f"remove {len(resolved)} record(s)", yes)
        removed = bank.rm(resolved, reason=reason)
    if as_json:
        _print_json({"action": "removed", "ids": removed})
    else:
        _say(f"removed {len(removed)} record(s): {', '.join(removed)}")


@command("evict")
def evict(
    dry_run: bool = typer.Option(False, "--dry-run", help="Only show what would be evicted."),
    family: Optional[str] = FamilyOpt,
    memory_url: Optional[str] = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Evict by policy so each family fits its capacity: lowest keep-score (value, use, recency)
    first; golden never."""
    with _bank(memory_url) as bank:
        plan = bank.evict(dry_run=dry_run, family=family)
        capacity = bank.config.capacity_per_family
    if as_json:
        _print_json({"dry_run": dry_run, "capacity_per_family": capacity, "evicted": [asdict(c) for c in plan]})
        return
    if not plan:
        _say(f"nothing to evict: every family is within its capacity ({capacity} episodes, memory.capacity_per_family)")
        return
    verb = "would evict" if dry_run else "evicted"
    _cli().out.print(view.eviction_table(plan, f"{verb} {len(plan)} episode(s) (capacity {capacity} per family)"))


@command("export")
def export(
    path: Path = typer.Argument(..., help="The JSONL file to write (one record per line)."),
    family: Optional[str] = FamilyOpt,
    include_quarantine: bool = typer.Option(True, "--include-quarantine/--no-quarantine", help="Export quarantined records too."),
    memory_url: Optional[str] = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Write records to a JSONL file; `crl memory import` restores them losslessly."""
    with _bank(memory_url) as bank:
        n = bank.export(path, family=family, include_quarantine=include_quarantine)
    if as_json:
        _print_json({"path": str(path), "records": n})
    else:
        _say(f"exported {n} record(s) to {path}")


@command("import")
def import_(
    path: Path = typer.Argument(..., help="A JSONL file written by `crl memory export`."),
    memory_url: Optional[str] = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Add the records of a JSONL export (validated first: on a bad line nothing is written)."""
    if not path.is_file():
        raise FileNotFoundError(f"no file {path}")
    with _bank(memory_url) as bank:
        report = bank.import_file(path)
    if as_json:
        _print_json(asdict(report))
    else:
        _say(f"imported {report.episodes} episode(s), {report.steps} step(s), {report.rules} rule(s) from {path}")


@command("stats")
def stats(memory_url: Optional[str] = MemoryUrlOpt, as_json: bool = JsonOpt) -> None:
    """Counts by family, tier, outcome and source; value histogram; disk size; mode; embedding model."""
    with _bank(memory_url) as bank:
        s = bank.stats()
    if as_json:
        _print_json(asdict(s))
    else:
        view.render_stats(_cli().out, s)


@command("sync")
def sync(memory_url: Optional[str] = MemoryUrlOpt, as_json: bool = JsonOpt) -> None:
    """Store what run logs hold and the bank does not (e.g. episodes of a killed run)."""
    with _bank(memory_url) as bank:
        report = bank.sync()
    if as_json:
        _print_json(asdict(report))
        return
    _say(f"stored {report.episodes_ingested} episode(s), {report.steps_ingested} step(s) from {report.logs_read} "
         f"run log(s); {report.logs_unchanged} unchanged")
    for line in report.errors:
        _cli().err.print(f"[yellow]skipped:[/] {escape(line)}", highlight=False)


@command("rebuild")
def rebuild(
    as_of: Optional[str] = typer.Option(
        None, "--as-of", help="Roll memory back to this time: ISO 8601 (2025-01-31T12:00, local) or UNIX seconds."
    ),
    yes: bool = YesOpt,
    memory_url: Optional[str] = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Recreate the view from the run logs and the journal, now or as of a past moment
    (a rollback: every change after it is cancelled for good)."""
    from memory.results import parse_time

    when = None if as_of is None else parse_time(as_of)
    cli = _cli()
    with _bank(memory_url) as bank:
        if when is not None:
            later = [e for e in bank.state.entries if e.time > when]
            if later and not yes:
                ops: dict[str, int] = {}
                for e in later:
                    ops[e.op] = ops.get(e.op, 0) + 1
                summary = ", ".join(f"{n} {op}" for op, n in sorted(ops.items()))
                cli.err.print(f"rolling back to {view.when(when)} cancels {len(later)} change(s) for good: {summary}",
                              highlight=False)
            if later:
                _confirm(f"roll memory back to {view.when(when)}", yes)
        with cli.err.status("rebuilding the memory view from the journal and run logs..."):
            report = bank.rebuild(as_of=when)
    if as_json:
        _print_json(asdict(report))
        return
    since = f" as of {view.when(report.as_of)}" if report.as_of is not None else ""
    _say(f"rebuilt{since}: {report.entries} journal entries replayed, {report.episodes} episodes, {report.steps} steps, "
         f"{report.rules} rules ({report.reused_vectors} embeddings reused) in {report.seconds:.1f} s")
    for line in report.missing:
        cli.err.print(f"[yellow]missing:[/] {escape(line)}", highlight=False)


@command("history")
def history(
    record_id: str = typer.Argument(..., help="An episode id (or unique prefix), or a full record id."),
    memory_url: Optional[str] = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Every change to a record, from the journal: time, actor, op, details, and whether a rollback cancelled it."""
    with _bank(memory_url) as bank:
        rid = bank.resolve(record_id)
        items = bank.history(rid)
    if as_json:
        _print_json(view.history_json(items))
        return
    if not items:
        _say(f"the journal has no entry for {rid}")
        return
    _cli().out.print(view.history_table(items, rid))

