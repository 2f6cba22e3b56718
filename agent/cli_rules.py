"""`crl memory rules` (ls, show, edit, rm, pin, unpin) and `crl reflect`: the reflector's rules
from the command line, one thin command per library call.

`agent.cli` mounts them (`memory_app.add_typer(rules_app, name="rules")` and
`app.command("reflect")(reflect)`). Helpers of the main CLI are imported when a command
runs, not when this module loads, to avoid an import cycle (as in `agent.cli_memory`).
"""

from __future__ import annotations

import functools
from typing import Any, List, Literal, Optional

import typer
from rich.table import Table
from rich.text import Text

from agent.cli_memory import JsonOpt, MemoryUrlOpt, _bank, _cli, _print_json, _say

rules_app = typer.Typer(help="Inspect and curate the rules the reflector learned.", no_args_is_help=True)

FamilyOpt = typer.Option(None, "--family", "-f", help="Task family, e.g. keyroom.")
RuleArg = typer.Argument(..., help="A rule id (ru:SCOPE:HASH) or a unique part of it, e.g. its hash prefix.")
RulesArg = typer.Argument(..., help="Rule ids (ru:SCOPE:HASH) or unique parts of them.")
SORTS = {"score": lambda r: (-r.score, r.id), "recent": lambda r: (-r.created_at, r.id), "use": lambda r: (-r.use_count, r.id)}


def _guarded(fn):
    """Fixable errors print one red line and exit 1 (`agent.cli.friendly_errors`, resolved at call time)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return _cli().friendly_errors(fn)(*args, **kwargs)

    return wrapper


def command(name: str):
    """Register a `crl memory rules` command."""

    def register(fn):
        return rules_app.command(name)(_guarded(fn))

    return register


def resolve_rule(bank, ref: str) -> str:
    """A rule id from a full id or a unique part of one (the hash, or a prefix of the id).

    Raises:
        LookupError: no rule matches, or several do.
    """
    ref = ref.strip()
    ids = [r.id for r in bank.ls("rule")]
    if ref in ids:
        return ref
    matches = sorted(i for i in ids if i.startswith(ref) or i.rsplit(":", 1)[-1].startswith(ref))
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise LookupError(f"no rule {ref!r}; `crl memory rules ls` lists them")
    raise LookupError(f"{ref!r} matches {len(matches)} rules ({', '.join(matches[:4])}, ...); give more of the id")


def _rule_row(r) -> dict[str, Any]:
    return r.model_dump(mode="json") | {"scope_label": r.scope_label, "pinned": r.tier == "golden"}


def rules_table(rules, title: str) -> Table:
    """Rules, one row each: short id (its hash: any unique part of it names the rule), scope,
    score, text and the model that wrote it; pinned rules are marked."""
    table = Table(title=title, title_justify="left", caption="[dim]* pinned[/]" if any(r.tier == "golden" for r in rules) else None)
    table.add_column("id", min_width=8)
    table.add_column("scope")
    table.add_column("score", justify="right")
    table.add_column("text", min_width=24, overflow="fold")
    table.add_column("by", max_width=12, overflow="ellipsis", no_wrap=True)
    for r in rules:
        pin = "*" if r.tier == "golden" else ""
        table.add_row(Text(r.id.rsplit(":", 1)[-1][:8]), Text(r.scope_label), f"{r.score:g}{pin}", Text(r.text),
                      Text(r.model or "person"))
    return table


@command("ls")
def ls(
    family: Optional[str] = FamilyOpt,
    variant: Optional[str] = typer.Option(None, "--variant", help="Only rules that apply to this variant (e.g. key)."),
    include_quarantine: bool = typer.Option(False, "--include-quarantine", help="List quarantined rules too."),
    sort: Literal["score", "recent", "use"] = typer.Option("score", "--sort"),
    limit: int = typer.Option(50, "--limit", "-n", help="Most rows shown (0: all)."),
    memory_url: Optional[str] = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """List rules with their scope, score, text, the model that wrote them, and uses."""
    with _bank(memory_url) as bank:
        rules = bank.rules(family, include_quarantine=include_quarantine)
    if variant is not None:
        rules = [r for r in rules if r.variant in (None, variant)]
    rules.sort(key=SORTS[sort])
    shown = rules[:limit] if limit > 0 else rules
    if as_json:
        _print_json([_rule_row(r) for r in shown])
        return
    if not rules:
        _say("no rules yet; `crl reflect` distils them from stored episodes (and `crl run` does every few episodes)")
        return
    _cli().out.print(rules_table(shown, f"{len(shown)} of {len(rules)} rules, by {sort}"))


@command("show")
def show(rule: str = RuleArg, memory_url: Optional[str] = MemoryUrlOpt, as_json: bool = JsonOpt) -> None:
    """One rule in full: text, scope, score, provenance, the model that wrote it, its history of
    edits and votes, and the reflections that changed it."""
    from agent import render_memory as view
    from memory.reflector import LOG_NAME, ReflectionLog

    with _bank(memory_url) as bank:
        rid = resolve_rule(bank, rule)
        record = bank.get(rid)
        history = bank.history(rid)
        reflections = ReflectionLog(bank.dir / LOG_NAME).about_rule(rid)
    if as_json:
        _print_json({"rule": _rule_row(record), "history": view.history_json(history),
                     "reflections": [{k: e.get(k) for k in ("reflection", "time", "model", "input", "accepted", "rejected")}
                                     for e in reflections]})
        return
    out = _cli().out
    meta = Table(show_header=False, box=None, pad_edge=False)
    meta.add_column(style="bold")
    meta.add_column()
    for key, value in (
        ("id", record.id), ("text", record.text), ("scope", record.scope_label), ("score", f"{record.score:g}"),
        ("tier", "pinned (golden)" if record.tier == "golden" else record.tier),
        ("written by", record.model or "a person"), ("episodes", ", ".join(record.provenance) or "-"),
        ("reflections", ", ".join(record.reflections) or "-"),
        ("uses", f"{record.use_count} ({record.use_successes} in successful episodes)"),
        ("created", view.when(record.created_at)), ("updated", view.when(record.updated_at)),
    ):
        meta.add_row(key, Text(str(value)))
    out.print(meta)
    out.print(view.history_table(history, rid))


@command("edit")
def edit(
    rule: str = RuleArg,
    text: str = typer.Argument(..., help="The new text (one short sentence)."),
    memory_url: Optional[str] = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Rewrite a rule's text (its id, score and history stay)."""
    from agent.reflect import reflect_config
    from memory.rule_ops import clean_rule_text

    cli = _cli()
    settings = cli._settings(cli._overrides(memory__url=memory_url))
    limit = reflect_config(settings).max_rule_chars
    clean, why = clean_rule_text(text, limit)
    if clean is None:
        raise ValueError(f"cannot use that text: {why}")
    with _bank(memory_url, settings) as bank:
        rid = resolve_rule(bank, rule)
        bank.edit_rule(rid, clean)
    if as_json:
        _print_json({"action": "edited", "id": rid, "text": clean})
    else:
        _say(f"edited {rid}: {clean}")


def _ids_action(memory_url: str | None, refs: List[str], as_json: bool, action: str, do) -> None:
    with _bank(memory_url) as bank:
        ids = list(dict.fromkeys(resolve_rule(bank, r) for r in refs))
        do(bank, ids)
    if as_json:
        _print_json({"action": action, "ids": ids})
    else:
        _say(f"{action} {len(ids)} rule(s): {', '.join(ids)}")


@command("rm")
def rm(
    rules: List[str] = RulesArg,
    reason: str = typer.Option("removed by user", "--reason", help="Why (kept in the journal)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    memory_url: Optional[str] = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Delete rules (their history stays in the journal)."""
    from agent.cli_memory import _confirm

    def remove(bank, ids):
        _confirm(f"remove {len(ids)} rule(s)", yes)
        bank.rm(ids, reason=reason)

    _ids_action(memory_url, rules, as_json, "removed", remove)


@command("pin")
def pin(rules: List[str] = RulesArg, memory_url: Optional[str] = MemoryUrlOpt, as_json: bool = JsonOpt) -> None:
    """Pin rules: the reflector never edits, removes or prunes them (their score still moves)."""
    _ids_action(memory_url, rules, as_json, "pinned", lambda bank, ids: bank.pin(ids))


@command("unpin")
def unpin(rules: List[str] = RulesArg, memory_url: Optional[str] = MemoryUrlOpt, as_json: bool = JsonOpt) -> None:
    """Return pinned rules to the reflector's care."""
    _ids_action(memory_url, rules, as_json, "unpinned", lambda bank, ids: bank.release(ids))


def _print_report(report) -> None:
    out, err = _cli().out, _cli().err
    out.print(Text(report.summary()), soft_wrap=True)
    if report.changes:
        table = Table(title="rule changes", title_justify="left")
        for col in ("op", "rule", "score", "text", "note"):
            table.add_column(col, overflow="fold", min_width=8 if col == "rule" else None)
        for c in report.changes:
            table.add_row(c.op, Text(c.rule_id.rsplit(":", 1)[-1][:8]), "" if c.score is None else f"{c.score:g}",
                          Text(c.text), Text(c.note))
        out.print(table)
    for o in report.outcomes:
        for r in o.rejected:
            err.print(Text(f"rejected {r['raw'][:100]!r}: {r['reason']}", style="dim"), soft_wrap=True)
    for e in report.errors:
        err.print(Text(f"error: {e}", style="bold red"), soft_wrap=True)


@_guarded
def reflect(
    family: Optional[str] = typer.Option(None, "--family", "-f", help="Only episodes of this task family."),
    since: Optional[str] = typer.Option(None, "--since", help="Only episodes of this run and later ones (a run id)."),
    reflect_model: Optional[str] = typer.Option(
        None, "--reflect-model", help="Model that reflects (default: reflect.model, else the acting model)."
    ),
    reflect_base_url: Optional[str] = typer.Option(
        None, "--reflect-base-url", help="OpenAI-compatible endpoint of the reflecting model."
    ),
    model: Optional[str] = typer.Option(None, "--model", help="The acting model (reflects when no other is set)."),
    memory_url: Optional[str] = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Distil rules from stored successes and failures now: compare them, and add, edit or
    vote on the rules later prompts show."""
    from agent.reflect import build_reflect_model, reflect_config, reflect_settings
    from memory.reflector import Reflector

    cli = _cli()
    settings = cli._settings(cli._overrides(memory__url=memory_url, llm__model=model))
    chat = build_reflect_model(settings, reflect_model=reflect_model, base_url=reflect_base_url)
    config = reflect_config(settings, reflect_settings(settings, reflect_model, reflect_base_url))
    try:
        with _bank(memory_url, settings) as bank:
            report = Reflector(bank, chat, config).reflect(family=family, since_run=since)
    finally:
        close = getattr(chat, "close", None)
        if close is not None:
            close()
    if as_json:
        _print_json(report.to_dict())
    else:
        if not report.outcomes and not report.errors:
            _say("nothing to reflect on: every stored episode was reflected on already (or none matches); "
                 "`crl run` stores more")
        else:
            _print_report(report)
    if report.errors:
        raise typer.Exit(1)
