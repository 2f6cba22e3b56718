"""`crl synth`: make verified experience from stored experience.

`segment` shows the skill segments episodes are cut into; `relabel` turns failures that reached
a sub-goal into successes of that sub-goal's task; `stitch` joins segments into demonstrations
of a compound task; `mine` derives precondition and ordering rules from the bank's statistics.
Every relabelled or stitched episode is replayed in the real environment and stored only when
the replay succeeds (`--dry-run` replays and stores nothing); synthetic records are listed,
shown and removed like any other (`crl memory ls --source synthetic`, `crl memory show`,
`crl memory rm`).
"""

from __future__ import annotations

from typing import Any

import typer

from crl.agent.cli.common import (
    Col,
    FamilyOpt,
    JsonOpt,
    MemoryUrlOpt,
    Similarity,
    command,
    emit,
    err,
    fitted_table,
    open_bank,
    out,
    value,
)

app = typer.Typer(
    help="Synthesize verified experience: skill segments, relabelling, stitching, mined rules.", no_args_is_help=True
)

DryRunOpt = typer.Option(False, "--dry-run", help="Synthesize and validate by replay, but store nothing.")

SEGMENT_COLUMNS = [
    Col("episode"),
    Col("task"),
    Col("seed", right=True),
    Col("skill"),
    Col("steps", right=True),
    Col("reached"),
    Col("actions", wrap=True, drop=1),
]
MADE_COLUMNS = [
    Col("episode"),
    Col("kind"),
    Col("task"),
    Col("seed", right=True),
    Col("steps", right=True),
    Col("parents", wrap=True, drop=1),
]
REJECTED_COLUMNS = [
    Col("kind"),
    Col("task"),
    Col("seed", right=True),
    Col("reason"),
    Col("detail", wrap=True, drop=1),
]


def family_in(bank, family: str | None) -> str:
    """`family`, or the bank's only family when none is given."""
    if family:
        return family
    families = sorted({r.family for r in bank.ls(kind="episode", source="real")})
    if len(families) == 1:
        return families[0]
    if not families:
        raise ValueError("the bank holds no played episodes; `crl run TASK` stores some")
    raise ValueError(f"the bank holds several families ({', '.join(families)}): choose one with --family")


def made_rows(result) -> list[dict[str, Any]]:
    """One row per synthetic episode a pass made."""
    from crl.memory.synthesis import provenance_of

    rows = []
    for e in result.episodes:
        prov = provenance_of(e)
        rows.append(
            {
                "episode": e.episode_id,
                "kind": prov.kind if prov else "",
                "task": e.task,
                "seed": e.seed,
                "steps": len(e.steps),
                "parents": ", ".join(dict.fromkeys(prov.parents)) if prov else "",
            }
        )
    return rows


def pass_view(result, dry_run: bool):
    """The counts of a pass, then what it made and what it turned down."""
    made, rejected = made_rows(result), [r.to_dict() for r in result.rejected]

    def render() -> None:
        for line in result.report.lines():
            out.print(line, highlight=False)
        if made:
            verb = "would store (dry run)" if dry_run else "stored"
            out.print(fitted_table(made, MADE_COLUMNS, out.width, f"{len(made)} synthetic episodes {verb}"))
        if rejected:
            out.print(fitted_table(rejected, REJECTED_COLUMNS, out.width, f"{len(rejected)} turned down"))
        if not made and not rejected:
            out.print("nothing to synthesize", highlight=False)

    return render


def pass_json(result, dry_run: bool) -> dict[str, Any]:
    """A pass as JSON: counts, made episodes, rejections."""
    return {
        "dry_run": dry_run,
        "report": result.report.to_dict(),
        "episodes": made_rows(result),
        "rejected": [r.to_dict() for r in result.rejected],
    }


@command(app, "segment")
def segment(
    family: str | None = FamilyOpt,
    task: str | None = typer.Option(None, "--task", help="Only episodes of this task, e.g. keyroom/compound."),
    limit: int = typer.Option(50, "--limit", "-n", help="Most rows shown (0: all)."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Accepted for symmetry with the other passes: segmenting never stores anything."
    ),
    memory_url: str | None = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Cut the played episodes of a family into skill segments at the sub-goals they reached (stores nothing)."""
    del dry_run
    from crl.memory.synthesis import segment_episodes
    from crl.memory.synthesis.bank_io import episodes_from_bank
    from crl.memory.synthesis.bank_pass import same_task

    with open_bank(memory_url) as bank:
        family = family_in(bank, family)
        episodes = episodes_from_bank(bank, family)
    if task:
        episodes = [e for e in episodes if same_task(e.task, task)]
    segments = segment_episodes(episodes)
    rows = [
        {
            "episode": s.episode_id,
            "task": s.task,
            "seed": s.seed,
            "skill": s.skill,
            "steps": f"{s.start}-{s.end}",
            "reached": "yes" if s.reached else "no",
            "actions": "; ".join(s.actions),
        }
        for s in segments
    ]
    shown = rows[:limit] if limit > 0 else rows

    def render() -> None:
        if not rows:
            out.print(f"no segments: the bank holds no played {family} episodes with steps", highlight=False)
            return
        title = f"{len(shown)} of {len(rows)} segments of {len(episodes)} {family} episodes"
        out.print(fitted_table(shown, SEGMENT_COLUMNS, out.width, title))

    emit(rows if as_json else None, as_json, render)


@command(app, "relabel")
def relabel(
    family: str | None = FamilyOpt,
    dry_run: bool = DryRunOpt,
    memory_url: str | None = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Make sub-task successes of failures that reached a sub-goal (validated by replay; new failures only)."""
    from crl.memory.synthesis.bank_pass import synthesize_bank

    with open_bank(memory_url) as bank:
        family = family_in(bank, family)
        with err.status(f"relabelling {family} failures (each replayed in the environment)"):
            result = synthesize_bank(bank, family, relabel=True, dry_run=dry_run)
    emit(pass_json(result, dry_run) if as_json else None, as_json, pass_view(result, dry_run))


def compound_tasks(bank, family: str) -> list[str]:
    """The family's compound tasks (a declared sub-goal order of their own) with the knobs its played
    episodes used: what `crl synth stitch --family F` stitches."""
    from crl.memory.synthesis.task_skills import stitchable
    from crl.tasks.registry import list_tasks

    bases = sorted(t.name for t in list_tasks() if t.family == family and stitchable(t.name))
    if not bases:
        raise ValueError(
            f"family {family!r} declares no compound task (no sub-goal order); name the task to stitch, "
            "e.g. `crl synth stitch 'twx/twc?numLocations=1'`"
        )
    knobs = sorted({r.task.partition("?")[2] for r in bank.ls(kind="episode", family=family, source="real")})
    return [f"{base}?{q}" if q else base for base in bases for q in knobs or [""]]


@command(app, "stitch")
def stitch(
    task: str | None = typer.Argument(
        None,
        help="A compound task, e.g. keyroom/compound (default: the family's compound tasks, with the knobs played).",
    ),
    family: str | None = FamilyOpt,
    seeds: str | None = typer.Option(
        None, "--seeds", help="Comma-separated seeds (default: the worlds played where TASK has no success yet)."
    ),
    similarity: Similarity | None = typer.Option(
        None,
        "--similarity",
        help="How a segment from another world is matched: lexical or embedding (default: synthesis.similarity).",
    ),
    threshold: float | None = typer.Option(
        None,
        "--threshold",
        help="Similarity a segment from another world needs (default: synthesis.threshold, else the similarity's own).",
    ),
    dry_run: bool = DryRunOpt,
    memory_url: str | None = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Join stored skill segments into demonstrations of TASK; keep those that replay to a success."""
    from crl.agent.cli.common import effective_settings, overrides
    from crl.memory.synthesis import SynthesisResult
    from crl.memory.synthesis.bank_pass import synthesize_bank
    from crl.memory.synthesis.task_skills import family_of

    if task and family and family_of(task) != family:
        raise typer.BadParameter(
            f"{task} is a task of family {family_of(task)!r}, not {family!r}", param_hint="--family"
        )
    chosen = [int(s) for s in seeds.split(",") if s.strip()] if seeds else None
    settings = effective_settings(overrides(memory__url=memory_url))
    match = value(similarity) or settings.synthesis.similarity
    limit = threshold if threshold is not None else settings.synthesis.threshold
    with open_bank(memory_url, settings) as bank:
        tasks = [task] if task else compound_tasks(bank, family_in(bank, family))
        result = SynthesisResult()
        for name in tasks:
            with err.status(f"stitching {name} (each demonstration replayed in the environment)"):
                one = synthesize_bank(
                    bank,
                    family_of(name),
                    relabel=False,
                    stitch_task=name,
                    seeds=chosen,
                    similarity=match,
                    threshold=limit,
                    dry_run=dry_run,
                )
            result.extend(one)
    emit(pass_json(result, dry_run) if as_json else None, as_json, pass_view(result, dry_run))


MINED_COLUMNS = [
    Col("kind"),
    Col("support", right=True),
    Col("counter", right=True),
    Col("confidence", right=True),
    Col("kept"),
    Col("text", wrap=True),
    Col("note", drop=1),
]


@command(app, "mine")
def mine(
    family: str | None = FamilyOpt,
    min_support: int | None = typer.Option(
        None, "--min-support", help="Fewest episodes a rule needs (default: reflect.mine.min_support)."
    ),
    min_confidence: float | None = typer.Option(
        None, "--min-confidence", help="Least share of agreeing episodes (default: reflect.mine.min_confidence)."
    ),
    dropped: bool = typer.Option(False, "--dropped", help="List the candidates below the thresholds too, with why."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Count and judge the rules, but store nothing."),
    memory_url: str | None = MemoryUrlOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Mine precondition, ordering and dead-end rules from the bank's statistics; store them as rules."""
    from crl.agent.cli.common import effective_settings, overrides
    from crl.memory.reflection import MiningConfig, mine_rules

    settings = effective_settings(overrides(memory__url=memory_url))
    given = {"min_support": min_support, "min_confidence": min_confidence}
    config = MiningConfig.model_validate(
        settings.reflect.mine.model_dump() | {k: v for k, v in given.items() if v is not None}
    )
    with open_bank(memory_url, settings) as bank:
        family = family_in(bank, family)
        report = mine_rules(bank, family, config=config, dry_run=dry_run)

    def render() -> None:
        rows = report.rows(dropped=dropped)
        out.print(fitted_table(rows, MINED_COLUMNS, out.width, report.summary()) if rows else report.summary())

    emit(report.to_dict() if as_json else None, as_json, render)
