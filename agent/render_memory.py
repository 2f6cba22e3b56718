"""Rich renderings of experience-bank records for `crl memory`: tables, record details, stats.

Pure functions of records and reports: they print to the console they are given and never
touch the bank, so `crl memory` stays a thin layer over `ExperienceBank`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from crl.agent.render import render_episode
from crl.memory.curation import EvictionCandidate
from crl.memory.records import AnyRecord, EpisodeRecord, RuleRecord, StepRecord
from crl.memory.results import HistoryItem, MemoryStats
from crl.memory.storage.journal import JournalEntry
from crl.memory.storage.store import Hit

OUTCOME_STYLE = {"success": "green", "failure": "red", "unfinished": "yellow"}
TIER_STYLE = {"golden": "bold yellow", "regular": "", "quarantine": "magenta"}
HISTOGRAM_WIDTH = 40


def plain(value: Any) -> Text:
    """A value as literal text: stored strings (observations, tags) may hold `[...]`, which rich would read as markup."""
    return value if isinstance(value, Text) else Text(str(value))


def short_id(record: AnyRecord) -> str:
    """The id a user types back: an episode's bare episode id (any unique prefix resolves), else the record id."""
    return record.episode_id if isinstance(record, EpisodeRecord) else record.id


def age(seconds_ago: float) -> str:
    """A compact age such as `42s`, `5m`, `3h`, `12d`.

    >>> age(7200)
    '2h'
    """
    s = max(0.0, seconds_ago)
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if s >= size:
            return f"{int(s // size)}{unit}"
    return f"{int(s)}s"


def when(t: float | None) -> str:
    """A UNIX time as local `YYYY-MM-DD HH:MM:SS` ('-' for none)."""
    return "-" if t is None else datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def outcome_text(outcome: str) -> Text:
    """The outcome word in its colour (green success, red failure)."""
    return Text(outcome, style=OUTCOME_STYLE.get(outcome, ""))


def tier_text(tier: str) -> Text:
    """The tier word in its colour."""
    return Text(tier, style=TIER_STYLE.get(tier, ""))


def _clip(text: str, n: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= n else flat[: n - 1] + "…"


def _record_outcome(record: AnyRecord) -> str:
    if isinstance(record, EpisodeRecord):
        return record.outcome
    if isinstance(record, StepRecord):
        return record.episode_outcome
    return ""


@dataclass
class Column:
    """A table column; `drop` > 0 marks it optional (the highest `drop` goes first when the
    table is too wide for the terminal), `wrap` lets long cells wrap instead of widening it."""

    name: str
    right: bool = False
    drop: int = 0
    wrap: bool = False


def fitted_table(title: str, columns: Sequence[Column], rows: Sequence[Sequence[str | Text]], width: int) -> Table:
    """A table of `rows` without the optional columns that would not fit in `width` characters.

    The caption names the columns left out, so a user knows to widen the terminal or use --json.
    """

    def cell_len(cell: str | Text) -> int:
        return len(cell.plain if isinstance(cell, Text) else cell)

    need = {
        i: min(max([len(c.name)] + [cell_len(r[i]) for r in rows]), 24 if c.wrap else 10_000) + 3
        for i, c in enumerate(columns)
    }
    keep = set(need)
    for i in sorted((i for i, c in enumerate(columns) if c.drop), key=lambda i: -columns[i].drop):
        if sum(need[j] for j in keep) + 1 <= width:
            break
        keep.discard(i)
    shown = [i for i in range(len(columns)) if i in keep]
    hidden = [columns[i].name for i in range(len(columns)) if i not in keep]
    caption = f"hidden to fit the terminal: {', '.join(hidden)} (widen it, or use --json)" if hidden else None
    table = Table(title=plain(title), title_justify="left", caption=caption, caption_justify="left")
    for i in shown:
        c = columns[i]
        table.add_column(c.name, justify="right" if c.right else "left", no_wrap=not c.wrap)
    for r in rows:
        table.add_row(*(plain(r[i]) for i in shown))
    return table


def records_table(
    records: Sequence[AnyRecord], kind: str, title: str, width: int = 200, now: float | None = None
) -> Table:
    """A listing of episodes, steps or rules (one row each) for `crl memory ls`, fitted to `width`."""
    now = time.time() if now is None else now
    rows: list[list[str | Text]] = []
    if kind == "episode":
        columns = [
            Column("id"),
            Column("task", drop=5),
            Column("seed", True, drop=3),
            Column("outcome"),
            Column("return", True),
            Column("steps", True, drop=4),
            Column("value", True),
            Column("utility", True, drop=6),
            Column("uses", True, drop=7),
            Column("tier"),
            Column("skills", drop=2),
            Column("age", True, drop=8),
        ]
        for r in records:
            assert isinstance(r, EpisodeRecord)
            rows.append(
                [
                    r.episode_id,
                    r.task,
                    str(r.seed),
                    outcome_text(r.outcome),
                    f"{r.total_return:g}",
                    str(r.length),
                    f"{r.value:.2f}",
                    f"{r.utility:.2f}",
                    str(r.use_count),
                    tier_text(r.tier),
                    ",".join(r.skills) or "-",
                    age(now - r.created_at),
                ]
            )
    elif kind == "step":
        columns = [
            Column("id"),
            Column("action", wrap=True),
            Column("reward", True),
            Column("outcome"),
            Column("value", True),
            Column("novelty", True, drop=3),
            Column("uses", True, drop=4),
            Column("tier"),
            Column("age", True, drop=5),
        ]
        for r in records:
            assert isinstance(r, StepRecord)
            rows.append(
                [
                    r.id,
                    r.action,
                    f"{r.reward:g}",
                    outcome_text(r.episode_outcome),
                    f"{r.value:.2f}",
                    f"{r.novelty:.2f}",
                    str(r.use_count),
                    tier_text(r.tier),
                    age(now - r.created_at),
                ]
            )
    else:
        columns = [
            Column("id"),
            Column("scope"),
            Column("score", True),
            Column("text", wrap=True),
            Column("uses", True, drop=2),
            Column("tier", drop=1),
            Column("age", True, drop=3),
        ]
        for r in records:
            assert isinstance(r, RuleRecord)
            rows.append(
                [r.id, r.scope, f"{r.score:g}", r.text, str(r.use_count), tier_text(r.tier), age(now - r.created_at)]
            )
    return fitted_table(title, columns, rows, width)


def _metadata_table(rows: list[tuple[str, Any]]) -> Table:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, plain(value))
    return table


def _common_rows(r: AnyRecord) -> list[tuple[str, Any]]:
    return [
        ("tier", tier_text(r.tier)),
        ("tags", ", ".join(r.tags) or "-"),
        ("source", r.source),
        ("value", f"{r.value:.3f}"),
        ("utility", f"{r.utility:.3f}  ({r.use_successes} successes in {r.use_count} uses)"),
        ("created", when(r.created_at)),
        ("updated", when(r.updated_at)),
        ("last used", when(r.last_used_at)),
    ]


def _provenance_rows(provenance: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """How a synthetic episode was made: its kind, parents, parts and replay (none for played ones)."""
    if not provenance:
        return []
    parts = [
        f"{p.get('skill', '?')} from {p.get('episode_id', '?')} (seed {p.get('seed', '?')}, {p.get('match', '?')}"
        + (f", bridge {len(p['bridge'])} moves" if p.get("bridge") else "")
        + ")"
        for p in provenance.get("parts") or []
    ]
    check = provenance.get("validation") or {}
    replayed = ", ".join(f"{k} {check[k]}" for k in ("success", "code", "env_steps") if k in check) or "-"
    return [
        ("synthetic", provenance.get("kind", "?")),
        ("parents", ", ".join(dict.fromkeys(provenance.get("parents") or [])) or "-"),
        *([("parts", "; ".join(parts))] if parts else []),
        ("validated by replay", replayed),
    ]


def render_record(console: Console, record: AnyRecord) -> None:
    """Print one record in full: an episode's metadata then its whole trajectory; a step's
    state and action; a rule's text and provenance."""
    if isinstance(record, EpisodeRecord):
        rows: list[tuple[str, Any]] = (
            [
                ("id", record.id),
                ("task", f"{record.task}  seed {record.seed}"),
                ("outcome", outcome_text(record.outcome)),
                ("return", f"{record.total_return:g} in {record.length} steps ({record.invalid_steps} invalid)"),
                ("ended", f"{record.status}: {record.end_reason or '-'}"),
                ("skills", ", ".join(record.skills) or "-"),
                ("novelty", f"{record.novelty:.3f}"),
                ("reward sparsity", f"{record.reward_sparsity:.2f}"),
                ("model", record.model + (f" + {record.adapter}" if record.adapter else "")),
                ("run", record.run_id),
            ]
            + _provenance_rows(record.provenance)
            + _common_rows(record)
        )
        console.print(_metadata_table(rows))
        render_episode(console, record.to_episode())
        return
    if isinstance(record, StepRecord):
        rows = [
            ("id", record.id),
            ("episode", f"{record.episode_id}  ({record.task} seed {record.seed}, step {record.index})"),
            ("episode outcome", outcome_text(record.episode_outcome)),
            ("novelty", f"{record.novelty:.3f}"),
            ("skills reached", ", ".join(record.skills) or "-"),
            ("model", record.model + (f" + {record.adapter}" if record.adapter else "")),
            ("run", record.run_id),
        ] + _common_rows(record)
        console.print(_metadata_table(rows))
        console.rule(f"[bold]step {record.index}[/]")
        console.print(Text.assemble(("Goal: ", "bold"), record.goal))
        if record.history:
            console.print(Text.assemble(("Recent actions: ", "bold"), " | ".join(record.history)))
        console.print(Text(record.observation.strip()))
        if record.thought:
            console.print(Text(f"Thought: {record.thought}", style="italic cyan"))
        action = Text(
            f"Action: {record.action}" if record.valid else f"Invalid: {record.action!r}",
            style="bold yellow" if record.valid else "bold red",
        )
        if record.reward:
            action.append(f"  reward {record.reward:g}", style="bold green")
        console.print(action)
        return
    rows = [
        ("id", record.id),
        ("scope", record.scope),
        ("score", f"{record.score:g}"),
        ("from episodes", ", ".join(record.provenance) or "-"),
    ] + _common_rows(record)
    console.print(_metadata_table(rows))
    console.print(Text(record.text))


def hit_text(record: AnyRecord) -> str:
    """What a search hit is about, in one line."""
    if isinstance(record, EpisodeRecord):
        return _clip(record.goal, 70)
    if isinstance(record, StepRecord):
        return _clip(f"{record.action} ← {record.observation}", 70)
    return _clip(record.text, 70)


def search_table(hits: Sequence[Hit], query: str, width: int = 200) -> Table:
    """Search results, best first, with their cosine similarity, fitted to `width`."""
    columns = [
        Column("#", True, drop=4),
        Column("similarity", True),
        Column("kind", drop=2),
        Column("id"),
        Column("task", drop=3),
        Column("outcome"),
        Column("tier", drop=1),
        Column("about", wrap=True),
    ]
    rows = [
        [
            str(i),
            f"{h.similarity:.3f}",
            h.record.kind,
            short_id(h.record),
            getattr(h.record, "task", h.record.family),
            outcome_text(_record_outcome(h.record)),
            tier_text(h.record.tier),
            hit_text(h.record),
        ]
        for i, h in enumerate(hits, 1)
    ]
    return fitted_table(f"nearest to {_clip(query, 60)!r}", columns, rows, width)


def eviction_table(plan: Sequence[EvictionCandidate], title: str) -> Table:
    """The episodes an eviction removes, lowest keep-score first."""
    table = Table(title=title, title_justify="left")
    for col in ("id", "family", "keep-score", "value", "uses", "age (days)"):
        table.add_column(col, justify="left" if col in ("id", "family") else "right", no_wrap=col == "id")
    for c in plan:
        cells = [c.id, c.family, f"{c.score:.3f}", f"{c.value:.2f}", str(c.use_count), f"{c.age_days:.1f}"]
        table.add_row(*map(plain, cells))
    return table


def human_bytes(n: int) -> str:
    """A byte count as `12.3 MiB`."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _counts_table(title: str, counts: dict[str, int]) -> Table:
    table = Table(title=title, title_justify="left", show_header=False)
    table.add_column()
    table.add_column(justify="right")
    for key, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])) or [("-", 0)]:
        table.add_row(outcome_text(key) if key in OUTCOME_STYLE else Text(key), str(n))
    return table


def histogram_lines(bins: Sequence[tuple[float, float, int]], width: int = HISTOGRAM_WIDTH) -> list[str]:
    """Text bars of a histogram, one line per bin.

    >>> histogram_lines([(0.0, 0.5, 2), (0.5, 1.0, 4)], width=4)
    ['0.0-0.5 ██    2', '0.5-1.0 ████  4']
    """
    top = max((n for *_, n in bins), default=0)
    lines = []
    for lo, hi, n in bins:
        bar = "█" * (round(width * n / top) if top else 0)
        lines.append(f"{lo:.1f}-{hi:.1f} {bar:<{width}} {n:>2}")
    return lines


def render_stats(console: Console, s: MemoryStats) -> None:
    """Print the bank's totals, counts by family/tier/outcome/source/skill and its value histogram."""
    console.print(
        _metadata_table(
            [
                ("episodes", s.episodes),
                ("steps", s.steps),
                ("rules", s.rules),
                ("journal entries", s.journal_entries),
                ("disk", human_bytes(s.disk_bytes)),
                ("mode", s.mode),
                ("embedding", s.embedding),
                ("schema version", s.schema_version),
            ]
        )
    )
    grid = Table.grid(padding=(0, 2))
    tables = [
        _counts_table("by family", s.by_family),
        _counts_table("by tier", s.by_tier),
        _counts_table("by outcome", s.by_outcome),
        _counts_table("by source", s.by_source),
        _counts_table("by skill", s.by_skill),
    ]
    grid.add_row(*tables)
    console.print(grid)
    console.print("[bold]episode value labels[/]")
    for line in histogram_lines(s.value_histogram):
        console.print(line, highlight=False)


def entry_summary(entry: JournalEntry) -> str:
    """What a journal entry did, in a few words (the payload without its bulk)."""
    p = entry.payload
    if entry.op == "ingest":
        state = "finished" if p.get("finished") else "running"
        return f"{p.get('n_steps')} steps ({state}), value {float(p.get('value', 0.0)):.2f}, run {p.get('run_id')}"
    if entry.op == "import":
        return f"{p.get('count')} records from {p.get('file')}"
    if entry.op in ("tag", "untag"):
        return ", ".join(p.get("tags", []))
    if entry.op == "tier":
        return f"-> {p.get('tier')}"
    if entry.op == "rm":
        return str(p.get("reason", ""))
    if entry.op == "credit":
        line = f"{'success' if p.get('success') else 'failure'}, target {p.get('target')}"
        if p.get("model_actor"):
            line += f", actor {p['model_actor']}"
        if p.get("paired"):
            line += f", paired {p['paired']}"
        return line
    if entry.op == "decay":
        return f"keep {1 - float(p.get('decay', 0)):g} of older actors' credit; now {p.get('model_actor')}"
    if entry.op == "rule_add":
        return _clip(str(p.get("record", {}).get("text", "")), 60)
    if entry.op == "rule_edit":
        return _clip(str(p.get("text", "")), 60)
    if entry.op == "rule_vote":
        return f"{float(p.get('delta', 0.0)):+g}"
    if entry.op == "rollback":
        return f"as of {when(p.get('as_of'))}"
    return _clip(str(p), 60)


def history_table(items: Sequence[HistoryItem], record_id: str) -> Table:
    """Every journal entry that touched a record, oldest first; cancelled ones dimmed."""
    table = Table(title=plain(f"history of {record_id}"), title_justify="left")
    for col in ("time", "actor", "op", "records", "details", "cancelled"):
        table.add_column(col, no_wrap=col in ("time", "op"))
    for item in items:
        e = item.entry
        style = "dim strike" if item.cancelled else ""
        records = e.ids[0] if len(e.ids) == 1 else f"{len(e.ids)} records"
        cells = [when(e.time), e.actor, e.op, records, entry_summary(e), "yes (rolled back)" if item.cancelled else ""]
        table.add_row(*map(plain, cells), style=style)
    return table


def history_json(items: Sequence[HistoryItem]) -> list[dict[str, Any]]:
    """History items as JSON-ready dicts (ingest payloads without their per-step lists)."""
    rows = []
    for item in items:
        e = item.entry
        payload = {k: v for k, v in e.payload.items() if k not in ("novelty", "step_values", "episode", "episodes")}
        rows.append(
            {
                "seq": e.seq,
                "time": e.time,
                "actor": e.actor,
                "op": e.op,
                "ids": e.ids,
                "payload": payload,
                "summary": entry_summary(e),
                "cancelled": item.cancelled,
            }
        )
    return rows
