"""`crl memory rules` (ls, show, edit, rm, pin, unpin) and `crl reflect`: the reflector's rules
from the command line, one thin command per library call."""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from crl.agent.cli.common import (
    Col,
    FamilyOpt,
    JsonOpt,
    MemoryUrlOpt,
    YesOpt,
    choices,
    command,
    confirm,
    effective_settings,
    emit,
    err,
    fitted_table,
    open_bank,
    out,
    overrides,
)

app = typer.Typer(help="Inspect and curate the rules the reflector learned.", no_args_is_help=True)
reflect_app = typer.Typer()

RuleArg = typer.Argument(..., help="A rule id (ru:SCOPE:HASH) or a unique part of it, e.g. its hash prefix.")
RulesArg = typer.Argument(..., help="Rule ids (ru:SCOPE:HASH) or unique parts of them.")
SORTS = {
    "score": lambda r: (-r.score, r.id),
    "recent": lambda r: (-r.created_at, r.id),
    "use": lambda r: (-r.use_count, r.id),
}
RuleSort = choices("RuleSort", list(SORTS))


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


def rule_row(r) -> dict[str, Any]:
    """A rule as JSON, with its scope label and whether it is pinned."""
    return r.model_dump(mode="json") | {"scope_label": r.scope_label, "pinned": r.tier == "golden"}


RULE_COLUMNS = [Col("id"), Col("scope"), Col("score", right=True), Col("text", wrap=True), Col("by", drop=1)]


def rules_table(rules, title: str) -> Table:
    """Rules, one row each: short id, scope, score, text and the model that wrote it.

    The short id is the start of the rule's hash (any unique part names the rule); pinned rules are marked.
    """
    rows = [
        {
            "id": r.id.rsplit(":", 1)[-1][:8],
            "scope": r.scope_label,
            "score": f"{r.score:g}{'*' if r.tier == 'golden' else ''}",
            "text": r.text,
            "by": r.model or "person",
        }
        for r in rules
    ]
    pinned = "* pinned" if any(r.tier == "golden" for r in rules) else None
    return fitted_table(rows, RULE_COLUMNS, out.width, title, pinned)


@command(app, "ls")
def ls(
    family: str | None = FamilyOpt,
    variant: str | None = typer.Option(None, "--variant", help="Only rules that apply to this variant (e.g. key)."),
    include_quarantine: bool = typer.Option(False, "--include-quarantine", help="List quarantined rules too."),
    sort: RuleSort = typer.Option("score", "--sort", help="Order of the rows."),
    limit: int = typer.Option(50, "--limit", "-n", help="Most rows shown (0: all)."),
    memory_url: str | None = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """List rules with their scope, score, text, the model that wrote them, and uses."""
    with open_bank(memory_url) as bank:
        rules = bank.rules(family, include_quarantine=include_quarantine)
    if variant is not None:
        rules = [r for r in rules if r.variant in (None, variant)]
    rules.sort(key=SORTS[sort.value])
    shown = rules[:limit] if limit > 0 else rules

    def render():
        if not rules:
            return (
                "no rules yet; `crl reflect` distils them from stored episodes (and `crl run` does every few episodes)"
            )
        return rules_table(shown, f"{len(shown)} of {len(rules)} rules, by {sort.value}")

    emit([rule_row(r) for r in shown], as_json, render)


@command(app, "show")
def show(rule: str = RuleArg, memory_url: str | None = MemoryUrlOpt, as_json: bool = JsonOpt) -> None:
    """One rule in full: text, scope, score, provenance, author, history and reflections."""
    from crl.agent import render_memory as view
    from crl.memory.reflection.reflector import LOG_NAME, ReflectionLog

    with open_bank(memory_url) as bank:
        rid = resolve_rule(bank, rule)
        record = bank.get(rid)
        history = bank.history(rid)
        reflections = ReflectionLog(bank.dir / LOG_NAME).about_rule(rid)

    def render() -> None:
        meta = Table(show_header=False, box=None, pad_edge=False)
        meta.add_column(style="bold", no_wrap=True)
        meta.add_column()
        for key, shown in (
            ("id", record.id),
            ("text", record.text),
            ("scope", record.scope_label),
            ("score", f"{record.score:g}"),
            ("tier", "pinned (golden)" if record.tier == "golden" else record.tier),
            ("written by", record.model or "a person"),
            ("episodes", ", ".join(record.provenance) or "-"),
            ("reflections", ", ".join(record.reflections) or "-"),
            ("uses", f"{record.use_count} ({record.use_successes} in successful episodes)"),
            ("created", view.when(record.created_at)),
            ("updated", view.when(record.updated_at)),
        ):
            meta.add_row(key, Text(str(shown)))
        out.print(meta)
        out.print(view.history_table(history, rid))

    data = {
        "rule": rule_row(record),
        "history": view.history_json(history),
        "reflections": [
            {k: e.get(k) for k in ("reflection", "time", "model", "input", "accepted", "rejected")} for e in reflections
        ],
    }
    emit(data, as_json, render)


@command(app, "edit")
def edit(
    rule: str = RuleArg,
    text: str = typer.Argument(..., help="The new text (one short sentence)."),
    memory_url: str | None = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Rewrite a rule's text (its id, score and history stay)."""
    from crl.agent.reflect import reflect_config
    from crl.memory.reflection.rule_ops import clean_rule_text

    settings = effective_settings(overrides(memory__url=memory_url))
    limit = reflect_config(settings).max_rule_chars
    clean, why = clean_rule_text(text, limit)
    if clean is None:
        raise ValueError(f"cannot use that text: {why}")
    with open_bank(memory_url, settings) as bank:
        rid = resolve_rule(bank, rule)
        bank.edit_rule(rid, clean)
    emit({"action": "edited", "id": rid, "text": clean}, as_json, f"edited {rid}: {clean}")


def ids_action(memory_url: str | None, refs: list[str], as_json: bool, action: str, do) -> None:
    """Resolve rule references, apply `do(bank, ids)` and report the ids."""
    with open_bank(memory_url) as bank:
        ids = list(dict.fromkeys(resolve_rule(bank, r) for r in refs))
        do(bank, ids)
    emit({"action": action, "ids": ids}, as_json, f"{action} {len(ids)} rule(s): {', '.join(ids)}")


@command(app, "rm")
def rm(
    rules: list[str] = RulesArg,
    reason: str = typer.Option("removed by user", "--reason", help="Why (kept in the journal)."),
    yes: bool = YesOpt,
    memory_url: str | None = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Delete rules (their history stays in the journal)."""

    def remove(bank, ids):
        confirm(f"remove {len(ids)} rule(s)", yes)
        bank.rm(ids, reason=reason)

    ids_action(memory_url, rules, as_json, "removed", remove)


@command(app, "pin")
def pin(rules: list[str] = RulesArg, memory_url: str | None = MemoryUrlOpt, as_json: bool = JsonOpt) -> None:
    """Pin rules: the reflector never edits, removes or prunes them (their score still moves)."""
    ids_action(memory_url, rules, as_json, "pinned", lambda bank, ids: bank.pin(ids))


@command(app, "unpin")
def unpin(rules: list[str] = RulesArg, memory_url: str | None = MemoryUrlOpt, as_json: bool = JsonOpt) -> None:
    """Return pinned rules to the reflector's care."""
    ids_action(memory_url, rules, as_json, "unpinned", lambda bank, ids: bank.release(ids))


def print_reflection(report) -> None:
    """A reflection's summary, its rule changes as a table, then rejected proposals and errors."""
    out.print(Text(report.summary()), soft_wrap=True)
    if report.changes:
        table = Table(title="rule changes", title_justify="left")
        for col in ("op", "rule", "score", "text", "note"):
            table.add_column(col, overflow="fold", min_width=8 if col == "rule" else None, no_wrap=col == "rule")
        for c in report.changes:
            table.add_row(
                c.op,
                Text(c.rule_id.rsplit(":", 1)[-1][:8]),
                "" if c.score is None else f"{c.score:g}",
                Text(c.text),
                Text(c.note),
            )
        out.print(table)
    for o in report.outcomes:
        for r in o.rejected:
            err.print(Text(f"rejected {r['raw'][:100]!r}: {r['reason']}", style="dim"), soft_wrap=True)
    for e in report.errors:
        err.print(Text(f"error: {e}", style="bold red"), soft_wrap=True)


@command(reflect_app, "reflect")
def reflect(
    family: str | None = typer.Option(None, "--family", "-f", help="Only episodes of this task family."),
    since: str | None = typer.Option(None, "--since", help="Only episodes of this run and later ones (a run id)."),
    reflect_model: str | None = typer.Option(
        None, "--reflect-model", help="Model that reflects (default: reflect.model, else the acting model)."
    ),
    reflect_base_url: str | None = typer.Option(
        None, "--reflect-base-url", help="OpenAI-compatible endpoint of the reflecting model."
    ),
    model: str | None = typer.Option(None, "--model", help="The acting model (reflects when no other is set)."),
    memory_url: str | None = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Distil rules from stored successes and failures now (add, edit or vote on rules)."""
    from crl.agent.reflect import build_reflect_model, reflect_config, reflect_settings
    from crl.memory.reflection.reflector import Reflector

    settings = effective_settings(overrides(memory__url=memory_url, llm__model=model))
    chat = build_reflect_model(settings, reflect_model=reflect_model, base_url=reflect_base_url)
    config = reflect_config(settings, reflect_settings(settings, reflect_model, reflect_base_url))
    try:
        with open_bank(memory_url, settings) as bank:
            report = Reflector(bank, chat, config).reflect(family=family, since_run=since)
    finally:
        close = getattr(chat, "close", None)
        if close is not None:
            close()

    def render():
        if not report.outcomes and not report.errors:
            return (
                "nothing to reflect on: every stored episode was reflected on already (or none matches); "
                "`crl run` stores more"
            )
        print_reflection(report)

    emit(report.to_dict(), as_json, render)
    if report.errors:
        raise typer.Exit(1)
