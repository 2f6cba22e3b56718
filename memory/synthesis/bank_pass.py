"""A synthesis pass over what the bank holds: read a family's episodes, synthesize, store.

This is what `crl synth relabel|stitch` and the automatic mode during runs call. Stitching
targets the worlds the bank has played and where the compound task has no success yet (for a task
with no declared sub-goal order, the worlds where its own episodes reported sub-goals);
relabelling skips failures already relabelled (their synthetic children are in the bank).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

from crl.memory.results import REMOVED_SKIP
from crl.memory.synthesis.bank_io import episodes_from_bank, store_synthetic
from crl.memory.synthesis.pipeline import synthesize
from crl.memory.synthesis.provenance import provenance_of
from crl.memory.synthesis.replay import EnvFactory
from crl.memory.synthesis.report import Rejection, SynthesisResult
from crl.memory.synthesis.similarity import similarity_named
from crl.memory.synthesis.task_skills import can_stitch, declares_order, episode_subgoals, family_of, world_key
from crl.memory.trajectory import Episode
from crl.tasks.registry import make_env, parse_task_name

if TYPE_CHECKING:
    from crl.memory.bank import ExperienceBank
    from crl.memory.results import IngestResult


def same_task(a: str, b: str) -> bool:
    """Whether two task names are the same task with the same knobs."""
    return parse_task_name(a) == parse_task_name(b)


def stitch_seeds(episodes: Iterable[Episode], task: str) -> list[int]:
    """The seeds worth stitching `task` on: worlds that stored played episodes come from (with
    `task`'s knobs) where no episode of `task` itself, played or synthetic, has succeeded. A task
    that declares no sub-goal order is stitched by the sub-goals its episodes report, so only worlds
    where one of its played episodes reported some count."""
    episodes = list(episodes)
    solved = {e.seed for e in episodes if e.success and same_task(e.task, task)}
    played = {e.seed for e in episodes if e.source == "real" and world_key(e.task, e.seed) == world_key(task, e.seed)}
    if not declares_order(task):
        played = {e.seed for e in episodes if e.seed in played and same_task(e.task, task) and episode_subgoals(e)}
    return sorted(played - solved)


def relabelled_parents(episodes: Iterable[Episode]) -> set[str]:
    """Ids of the played episodes that stored relabellings were made from."""
    out: set[str] = set()
    for e in episodes:
        prov = provenance_of(e)
        if prov is not None and prov.kind == "relabel":
            out.update(prov.parents)
    return out


def synthesize_bank(
    bank: ExperienceBank,
    family: str,
    *,
    relabel: bool = True,
    stitch_task: str | None = None,
    seeds: Collection[int] | None = None,
    skip: Collection[str] = (),
    similarity: str = "lexical",
    threshold: float | None = None,
    max_steps: int | None = None,
    dry_run: bool = False,
    env_factory: EnvFactory = make_env,
) -> SynthesisResult:
    """Synthesize from the bank's episodes of `family` and store what validated.

    Args:
        bank: the experience bank (read, and written unless `dry_run`).
        family: the task family whose played episodes are built from.
        relabel: relabel failures not relabelled before (nor listed in `skip`).
        stitch_task: a task of `family` to stitch (a compound task with a declared sub-goal order,
            or a task with none, stitched by the sub-goals its episodes report), or None.
        seeds: the seeds to stitch on (default: `stitch_seeds`).
        skip: episode ids not to relabel (already looked at).
        similarity: "lexical" or "embedding" (the bank's embedder), how a segment from another
            world is matched (see `similarity.similarity_named`).
        threshold: the similarity a segment from another world needs (see `stitch.plan_stitch`);
            None: the measured default of `similarity`.
        max_steps: the step limit a stitch must fit (default the task's own).
        dry_run: synthesize and validate by replay, but store nothing.
        env_factory: builds environments by task name.

    Raises:
        ValueError: `stitch_task` is not of `family`, or is a sub-task of its declared order; an
            unknown `similarity`.
    """
    match, default_threshold = similarity_named(similarity, bank.embed if similarity == "embedding" else None)
    if stitch_task is not None:
        if family_of(stitch_task) != family:
            raise ValueError(f"{stitch_task} is not a task of family {family!r}")
        if not can_stitch(stitch_task):
            raise ValueError(
                f"{stitch_task} declares no sub-goal order of its own (it is not a compound task), "
                "so there is nothing to stitch it from"
            )
    everything = episodes_from_bank(bank, family, source=None)
    played = [e for e in everything if e.source == "real"]
    done = relabelled_parents(everything) | set(skip)
    fresh = {e.episode_id for e in played if e.episode_id not in done}
    targets = sorted(seeds) if seeds is not None else stitch_seeds(everything, stitch_task) if stitch_task else []
    result = synthesize(
        played,
        relabel=relabel,
        relabel_only=fresh,
        stitch_task=stitch_task,
        stitch_seeds=targets,
        similarity=match,
        threshold=default_threshold if threshold is None else threshold,
        max_steps=max_steps,
        env_factory=env_factory,
    )
    if not dry_run and result.episodes:
        stored = store_synthetic(bank, result.episodes, actor="synthesis")
        keep_only_stored(result, stored)
    return result


def keep_only_stored(result: SynthesisResult, stored: list[IngestResult]) -> None:
    """Turn the episodes the bank would not take back (a user removed them before) into rejections."""
    kept = []
    for episode, outcome in zip(result.episodes, stored, strict=True):
        if outcome.skipped == REMOVED_SKIP:
            prov = provenance_of(episode)
            kind = prov.kind if prov is not None else "stitch"
            parents = list(prov.parents) if prov is not None else []
            detail = "validated by replay, but the same episode was removed from the bank before: not stored again"
            result.reject(Rejection(kind, episode.task, episode.seed, "removed", detail, parents))
        else:
            kept.append(episode)
    result.episodes = kept
