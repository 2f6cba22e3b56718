"""`crl memory`: inspect and curate the experience bank, one thin command per `ExperienceBank` method.

Every command opens the bank of the data directory (embedded, or the Chroma server given
by `--memory-url`), does one thing, and closes it. Listings are rich tables; `--json`
prints what a script may read.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from crl.agent.cli.common import (
    Col,
    FamilyOpt,
    JsonOpt,
    MemoryUrlOpt,
    YesOpt,
    choices,
    confirm,
    effective_settings,
    emit,
    err,
    open_bank,
    out,
    say,
    value,
)
from crl.agent.cli.common import (
    command as register,
)

app = typer.Typer(help="Inspect and curate the experience bank.", no_args_is_help=True)

IdsArg = typer.Argument(..., help="Record ids: an episode id or any unique prefix, or a full ep:/st:/ru: id.")
TagsOpt = typer.Option(..., "--tag", "-t", help="A label (repeat for several).")

SORT_KEYS = {"value": "value", "recent": "recency", "use": "use", "utility": "utility", "last-used": "last_used"}
Sort = choices("Sort", list(SORT_KEYS))
Tier = choices("Tier", ["golden", "regular", "quarantine"])
Source = choices("Source", ["real", "synthetic"])
RecordKind = choices("RecordKind", ["episode", "step", "rule"])
SearchKind = choices("SearchKind", ["all", "episode", "step"])


def command(name: str):
    """Register a `crl memory` command whose fixable errors print one red line and exit 1."""
    return register(app, name)


def view():
    """The renderers of bank records (imported on use: they load the bank's record types)."""
    from crl.agent import render_memory

    return render_memory


def record_json(record: Any, with_trajectory: bool = True) -> dict[str, Any]:
    """A record as JSON; episodes without their trajectory in listings."""
    exclude = None if with_trajectory or record.kind != "episode" else {"trajectory"}
    return record.model_dump(mode="json", exclude=exclude)


@command("ls")
def ls(
    family: str | None = FamilyOpt,
    variant: str | None = typer.Option(None, "--variant", help="Task variant, e.g. key (of keyroom/key)."),
    success: bool | None = typer.Option(None, "--success/--failure", help="Only successful (or failed) episodes."),
    tier: Tier | None = typer.Option(None, "--tier", help="Only records of this tier."),
    source: Source | None = typer.Option(None, "--source", help="Only real (played) or synthetic records."),
    skill: str | None = typer.Option(None, "--skill", help="Only records that reached this sub-goal, e.g. key."),
    tag: str | None = typer.Option(None, "--tag", help="Only records with this user label."),
    sort: Sort = typer.Option("recent", "--sort", help="Order of the rows."),
    limit: int = typer.Option(50, "--limit", "-n", help="Most rows shown (0: all)."),
    kind: RecordKind = typer.Option("episode", "--kind", help="What to list."),
    memory_url: str | None = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """List episodes (or steps, rules) with outcome, return, value, utility, uses and tier."""
    outcome = None if success is None else ("success" if success else "failure")
    with open_bank(memory_url) as bank:
        records = bank.ls(
            kind.value,
            family=family,
            variant=variant,
            outcome=outcome,
            tier=value(tier),
            source=value(source),
            skill=skill,
            tag=tag,
            sort=SORT_KEYS[sort.value],
        )
    shown = records[:limit] if limit > 0 else records

    def render() -> None:
        if not records:
            say(
                f"no {kind.value}s match; `crl run TASK` stores experience, `crl memory stats` shows what the bank holds"
            )
            return
        count = f"{len(shown)} of {len(records)}" if len(shown) < len(records) else f"{len(records)}"
        out.print(view().records_table(shown, kind.value, f"{count} {kind.value}s, by {sort.value}", width=out.width))
        if len(shown) < len(records):
            out.print(f"[dim]{len(records) - len(shown)} more: --limit 0 shows all[/]")

    emit([record_json(r, with_trajectory=False) for r in shown] if as_json else None, as_json, render)


@command("show")
def show(
    record_id: str = typer.Argument(..., help="An episode id (or unique prefix), or a full ep:/st:/ru: record id."),
    memory_url: str | None = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Show one record in full: an episode's tags and its whole trajectory."""
    with open_bank(memory_url) as bank:
        record = bank.get(record_id)
    emit(record_json(record) if as_json else None, as_json, lambda: view().render_record(out, record))


@command("search")
def search(
    text: str = typer.Argument(..., help="What to look for, e.g. 'a locked door and a key on the floor'."),
    k: int = typer.Option(10, "-k", help="How many results."),
    family: str | None = FamilyOpt,
    kind: SearchKind = typer.Option("all", "--kind", help="Search episodes, steps or both."),
    include_quarantine: bool = typer.Option(False, "--include-quarantine", help="Search quarantined records too."),
    memory_url: str | None = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Semantic search over stored episodes and steps, with cosine similarity scores."""
    if k < 1:
        raise ValueError("-k must be at least 1")
    kinds = ("episode", "step") if kind.value == "all" else (kind.value,)
    with open_bank(memory_url) as bank:
        hits = bank.search(text, k=k, family=family, kinds=kinds, include_quarantine=include_quarantine)

    def render():
        if not hits:
            return (
                "nothing found"
                + (f" in family {family!r}" if family else "")
                + "; `crl memory stats` shows what the bank holds"
            )
        return view().search_table(hits, text, width=out.width)

    data = [{"id": h.id, "similarity": h.similarity, "record": record_json(h.record, False)} for h in hits]
    emit(data, as_json, render)


def curate(memory_url: str | None, as_json: bool, action: str, do) -> None:
    """Apply `do(bank)` (which returns the record ids it changed) and report them."""
    with open_bank(memory_url) as bank:
        ids = do(bank)
    emit({"action": action, "ids": ids}, as_json, f"{action} {len(ids)} record(s): {', '.join(ids)}")


@command("tag")
def tag(
    ids: list[str] = IdsArg, tags: list[str] = TagsOpt, memory_url: str | None = MemoryUrlOpt, as_json: bool = JsonOpt
) -> None:
    """Add labels to records (`ls --tag` finds them again)."""
    curate(memory_url, as_json, f"tagged ({', '.join(tags)})", lambda bank: bank.tag(ids, tags))


@command("untag")
def untag(
    ids: list[str] = IdsArg, tags: list[str] = TagsOpt, memory_url: str | None = MemoryUrlOpt, as_json: bool = JsonOpt
) -> None:
    """Remove labels from records."""
    curate(memory_url, as_json, f"untagged ({', '.join(tags)})", lambda bank: bank.untag(ids, tags))


@command("pin")
def pin(ids: list[str] = IdsArg, memory_url: str | None = MemoryUrlOpt, as_json: bool = JsonOpt) -> None:
    """Move records to the golden tier: never evicted."""
    curate(memory_url, as_json, "pinned (golden)", lambda bank: bank.pin(ids))


@command("quarantine")
def quarantine(
    ids: list[str] = IdsArg,
    malicious: bool = typer.Option(
        False,
        "--malicious",
        help="Mark them malicious in the journal and list what they contaminated: derived rules, synthetic "
        "episodes, adapters trained on them.",
    ),
    reason: str = typer.Option("", "--reason", help="With --malicious: why (kept in the journal with the mark)."),
    with_rules: bool = typer.Option(False, "--with-rules", help="With --malicious: quarantine the derived rules too."),
    with_synthetic: bool = typer.Option(
        False, "--with-synthetic", help="With --malicious: quarantine the synthetic episodes made from them too."
    ),
    memory_url: str | None = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Keep records out of retrieval and fine-tuning data (they stay until removed)."""
    if not malicious:
        if reason or with_rules or with_synthetic:
            raise ValueError("--reason, --with-rules and --with-synthetic go with --malicious")
        curate(memory_url, as_json, "quarantined", lambda bank: bank.quarantine(ids))
        return
    from crl.agent.contamination_view import contamination_report, render_contamination
    from crl.finetune.registry import AdapterRegistry

    with open_bank(memory_url) as bank:
        report = bank.quarantine_malicious(ids, reason, with_rules=with_rules, with_synthetic=with_synthetic)
        data = contamination_report(bank, report, AdapterRegistry.of(effective_settings()))
    emit(data, as_json, lambda: render_contamination(out, data))


@command("release")
def release(ids: list[str] = IdsArg, memory_url: str | None = MemoryUrlOpt, as_json: bool = JsonOpt) -> None:
    """Return records to the regular tier (from golden or quarantine); a malicious mark on them is cleared."""
    curate(memory_url, as_json, "released (regular)", lambda bank: bank.release(ids))


@command("rm")
def rm(
    ids: list[str] = IdsArg,
    reason: str = typer.Option("removed by user", "--reason", help="Why (kept in the journal)."),
    yes: bool = YesOpt,
    memory_url: str | None = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Delete records (an episode with its steps); a later sync will not bring them back."""
    with open_bank(memory_url) as bank:
        resolved = list(dict.fromkeys(bank.resolve(i) for i in ids))
        if not yes:
            err.print("will remove: " + ", ".join(resolved), highlight=False, markup=False)
        confirm(f"remove {len(resolved)} record(s)", yes)
        removed = bank.rm(resolved, reason=reason)
    emit({"action": "removed", "ids": removed}, as_json, f"removed {len(removed)} record(s): {', '.join(removed)}")


@command("evict")
def evict(
    dry_run: bool = typer.Option(False, "--dry-run", help="Only show what would be evicted."),
    family: str | None = FamilyOpt,
    memory_url: str | None = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Evict by policy so each family fits its capacity; golden records never.

    The lowest keep-score (value, use, recency) goes first.
    """
    with open_bank(memory_url) as bank:
        plan = bank.evict(dry_run=dry_run, family=family)
        capacity = bank.config.capacity_per_family

    def render():
        if not plan:
            return f"nothing to evict: every family is within its capacity ({capacity} episodes, memory.capacity_per_family)"
        verb = "would evict" if dry_run else "evicted"
        return view().eviction_table(plan, f"{verb} {len(plan)} episode(s) (capacity {capacity} per family)")

    emit({"dry_run": dry_run, "capacity_per_family": capacity, "evicted": [asdict(c) for c in plan]}, as_json, render)


@command("export")
def export(
    path: Path = typer.Argument(..., help="The JSONL file to write (one record per line)."),
    family: str | None = FamilyOpt,
    include_quarantine: bool = typer.Option(
        True, "--include-quarantine/--no-quarantine", help="Export quarantined records too."
    ),
    memory_url: str | None = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Write records to a JSONL file; `crl memory import` restores them losslessly."""
    with open_bank(memory_url) as bank:
        n = bank.export(path, family=family, include_quarantine=include_quarantine)
    emit({"path": str(path), "records": n}, as_json, f"exported {n} record(s) to {path}")


@command("import")
def import_(
    path: Path = typer.Argument(..., help="A JSONL file written by `crl memory export`."),
    from_namespace: str | None = typer.Option(
        None, "--from-namespace", help="Copy records exported from this other namespace into this one (deliberately)."
    ),
    memory_url: str | None = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Add the records of a JSONL export (validated first: on a bad line nothing is written).

    Imported records are untrusted: they wait in quarantine for `crl memory review`, and a record
    this bank made from its own runs is never replaced.
    """
    if not path.is_file():
        raise FileNotFoundError(f"no file {path}")
    with open_bank(memory_url) as bank:
        report = bank.import_file(path, from_namespace=from_namespace)
    kept = report.kept_existing
    emit(
        asdict(report),
        as_json,
        f"imported {report.episodes} episode(s), {report.steps} step(s), {report.rules} rule(s) from {path}; "
        f"{report.pending_review} wait for `crl memory review`"
        + (f"; kept {len(kept)} record(s) this bank made itself: {', '.join(kept[:5])}" if kept else ""),
    )


def review_row(record: Any) -> dict[str, Any]:
    """One queued record as `crl memory review --json` lists it."""
    row = {"id": record.id, "kind": record.kind, "imported_from": record.imported_from, "review": record.review}
    if record.kind == "rule":
        return row | {"scope": record.scope_label, "text": record.text, "score": record.score}
    return row | {
        "task": record.task,
        "outcome": record.outcome if record.kind == "episode" else record.episode_outcome,
        "length": getattr(record, "length", None),
        "return": getattr(record, "total_return", None),
        "value": record.value,
        "source": record.source,
    }


def review_loop(bank: Any, queue: list[Any], note: str | None) -> list[dict[str, Any]]:
    """Ask about each queued record in turn: accept, reject, edit, skip or quit."""
    decisions = []
    for i, record in enumerate(queue, 1):
        out.print(f"[bold]{i}/{len(queue)}[/]")
        view().render_record(out, bank.get(record.id))
        while True:
            answer = typer.prompt("[a]ccept, [r]eject, [e]dit, [s]kip, [q]uit", default="s").strip().lower()[:1]
            if answer == "q":
                return decisions
            if answer == "s":
                break
            if answer in ("a", "r"):
                decision = "accept" if answer == "a" else "reject"
                bank.review(record.id, decision, note=note)
                decisions.append({"id": record.id, "decision": decision})
                break
            if answer == "e":
                labels = typer.prompt("tags (comma-separated, empty: keep)", default="", show_default=False)
                text = None
                if record.kind == "rule":
                    text = typer.prompt("rule text (empty: keep)", default="", show_default=False) or None
                tags = [t.strip() for t in labels.split(",") if t.strip()] or None
                if tags is None and text is None:
                    continue
                bank.review(record.id, "edit", tags=tags, text=text, note=note)
                decisions.append({"id": record.id, "decision": "edit"})
                continue
            err.print("answer a, r, e, s or q")
    return decisions


@command("review")
def review(
    accept: list[str] = typer.Option(
        [], "--accept", help="Accept a record (repeat): out of quarantine, its outcome vouched for by you."
    ),
    reject: list[str] = typer.Option(
        [], "--reject", help="Reject a record (repeat): it stays quarantined, out of the queue."
    ),
    edit: list[str] = typer.Option(
        [], "--edit", help="Edit a record (repeat) with --tag, --value or --text; it stays queued."
    ),
    tags: list[str] = typer.Option([], "--tag", "-t", help="With --edit: the record's labels (repeat for several)."),
    new_value: float | None = typer.Option(None, "--value", min=0.0, max=1.0, help="With --edit: the value label."),
    text: str | None = typer.Option(None, "--text", help="With --edit: a rule's new text."),
    pin: bool = typer.Option(False, "--pin", help="Accepted records go to the golden tier (default regular)."),
    note: str | None = typer.Option(None, "--note", help="Why (kept in the journal with each decision)."),
    interactive: bool = typer.Option(
        False, "--interactive", "-i", help="Ask about each queued record (default on a terminal)."
    ),
    memory_url: str | None = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Walk the review queue of imported records: accept, reject or edit each; every decision is journalled.

    With no decision flags it lists the queue (or, on a terminal, asks about each record).
    """
    import sys

    with open_bank(memory_url) as bank:
        if accept or reject or edit:
            decisions = []
            for ids, decision in ((accept, "accept"), (reject, "reject"), (edit, "edit")):
                if not ids:
                    continue
                kwargs: dict[str, Any] = {"note": note}
                if decision == "accept":
                    kwargs["tier"] = "golden" if pin else "regular"
                if decision == "edit":
                    kwargs |= {"tags": tags or None, "value": new_value, "text": text}
                decisions += [{"id": rid, "decision": decision} for rid in bank.review(ids, decision, **kwargs)]
            left = len(bank.review_queue())
            emit(
                {"decisions": decisions, "queued": left},
                as_json,
                "; ".join(f"{d['decision']} {d['id']}" for d in decisions) + f"; {left} record(s) still queued",
            )
            return
        queue = bank.review_queue()
        if not as_json and queue and (interactive or sys.stdin.isatty()):
            decisions = review_loop(bank, queue, note)
            say(f"{len(decisions)} decision(s); {len(bank.review_queue())} record(s) still queued")
            return

    rows = [review_row(r) for r in queue]
    if not rows and not as_json:
        say("nothing to review: imported records wait here until a curator accepts or rejects them")
        return
    columns = [
        Col("id"),
        Col("kind", drop=3),
        Col("task", drop=2),
        Col("outcome"),
        Col("value", right=True, fmt=lambda v: "-" if v is None else f"{v:.2f}"),
        Col("text", drop=4, wrap=True),
        Col("imported_from", "from", drop=1),
    ]
    emit(rows, as_json, columns, title=f"{len(rows)} record(s) to review: --accept ID, --reject ID or --edit ID")


def render_drift(results: list[Any]) -> None:
    """The drift monitor's verdict for each family holding synthetic experience, one line each."""
    shown = [r for r in results if r.n_synthetic]
    out.print("[bold]synthetic vs real experience[/] (drift monitor)")
    if not shown:
        out.print("  no synthetic experience in the bank", highlight=False)
    for r in shown:
        style = "red" if r.drifted else "green" if r.mmd2 is not None else "dim"
        line = escape(r.describe())
        if r.drifted:
            line += " in retrieval and datasets"
        out.print(f"  [{style}]{line}[/]", highlight=False)


@command("stats")
def stats(memory_url: str | None = MemoryUrlOpt, as_json: bool = JsonOpt) -> None:
    """Counts by family, tier, outcome and source; value histogram; disk size; mode; embedding model;
    drift of synthetic from real experience per family."""
    from crl.memory.synthesis.drift import drift_report

    with open_bank(memory_url) as bank:
        s = bank.stats()
        drift = drift_report(bank)

    def render() -> None:
        view().render_stats(out, s)
        render_drift(drift)

    emit(asdict(s) | {"drift": [r.to_dict() for r in drift]}, as_json, render)


@command("sync")
def sync(memory_url: str | None = MemoryUrlOpt, as_json: bool = JsonOpt) -> None:
    """Store what run logs hold and the bank does not (e.g. episodes of a killed run)."""
    with open_bank(memory_url) as bank:
        report = bank.sync()
    emit(
        asdict(report),
        as_json,
        f"stored {report.episodes_ingested} episode(s), {report.steps_ingested} step(s) "
        f"from {report.logs_read} run log(s); {report.logs_unchanged} unchanged",
    )
    for line in report.errors if not as_json else []:
        err.print(f"[yellow]skipped:[/] {escape(line)}", highlight=False)


@command("rebuild")
def rebuild(
    as_of: str | None = typer.Option(
        None, "--as-of", help="Roll memory back to this time: ISO 8601 (2025-01-31T12:00, local) or UNIX seconds."
    ),
    drop_run: list[str] = typer.Option(
        [], "--drop-run", help="Drop everything that came from this run, for good (repeat for several)."
    ),
    drop_import: list[str] = typer.Option(
        [], "--drop-import", help="Drop everything an import brought: the imported file or imports/DIGEST.jsonl."
    ),
    yes: bool = YesOpt,
    memory_url: str | None = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Recreate the view from the run logs and the journal, now or as of a past moment.

    With --as-of this is a rollback: every change after that moment is cancelled for good.
    --drop-run and --drop-import cancel, for good, every change a run (its episodes, credit, rules)
    or an import made.
    """
    from crl.memory.results import parse_time

    when = None if as_of is None else parse_time(as_of)
    with open_bank(memory_url) as bank:
        if when is not None:
            later = [e for e in bank.state.entries if e.time > when]
            if later and not yes:
                ops: dict[str, int] = {}
                for e in later:
                    ops[e.op] = ops.get(e.op, 0) + 1
                summary = ", ".join(f"{n} {op}" for op, n in sorted(ops.items()))
                err.print(
                    f"rolling back to {view().when(when)} cancels {len(later)} change(s) for good: {summary}",
                    highlight=False,
                )
            if later:
                confirm(f"roll memory back to {view().when(when)}", yes)
        if drop_run or drop_import:
            named = ", ".join([f"run {r}" for r in drop_run] + [f"import {f}" for f in drop_import])
            confirm(f"drop everything that came from {named}", yes)
        with err.status("rebuilding the memory view from the journal and run logs..."):
            report = bank.rebuild(as_of=when, drop_runs=drop_run, drop_imports=drop_import)
    since = f" as of {view().when(report.as_of)}" if report.as_of is not None else ""
    emit(
        asdict(report),
        as_json,
        f"rebuilt{since}: {report.entries} journal entries replayed, {report.episodes} episodes, {report.steps} steps, "
        f"{report.rules} rules ({report.reused_vectors} embeddings reused) in {report.seconds:.1f} s"
        + (f"; {report.dropped} journal entries dropped" if drop_run or drop_import else ""),
    )
    for line in report.missing if not as_json else []:
        err.print(f"[yellow]missing:[/] {escape(line)}", highlight=False)


@command("history")
def history(
    record_id: str = typer.Argument(..., help="An episode id (or unique prefix), or a full record id."),
    memory_url: str | None = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Every change to a record, from the journal: time, actor, op, details, and whether a rollback cancelled it."""
    with open_bank(memory_url) as bank:
        rid = bank.resolve(record_id)
        items = bank.history(rid)
    emit(
        view().history_json(items) if as_json else None,
        as_json,
        lambda: view().history_table(items, rid) if items else f"the journal has no entry for {rid}",
    )
