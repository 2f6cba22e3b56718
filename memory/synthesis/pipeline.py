"""One synthesis pass over a set of played episodes: segment, relabel, stitch."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable

from crl.memory.synthesis.relabel import relabel_episodes
from crl.memory.synthesis.replay import EnvFactory
from crl.memory.synthesis.report import SynthesisResult
from crl.memory.synthesis.segments import segment_episodes
from crl.memory.synthesis.similarity import LEXICAL_THRESHOLD, Similarity, lexical_similarity
from crl.memory.synthesis.stitch import stitch
from crl.memory.trajectory import Episode
from crl.tasks.registry import make_env


def synthesize(
    episodes: list[Episode],
    *,
    relabel: bool = True,
    relabel_only: Collection[str] | None = None,
    stitch_task: str | None = None,
    stitch_seeds: Iterable[int] = (),
    similarity: Similarity = lexical_similarity,
    threshold: float = LEXICAL_THRESHOLD,
    max_steps: int | None = None,
    env_factory: EnvFactory = make_env,
) -> SynthesisResult:
    """Segment `episodes`, relabel their failures, and stitch `stitch_task` on `stitch_seeds`.

    Only played episodes (`source="real"`) are built from; nothing is stored (see
    `bank_io.store_synthetic`).

    Args:
        episodes: the played episodes to build from.
        relabel: make sub-task successes of failures that reached sub-goals.
        relabel_only: relabel only the episodes with these ids (None: all); every episode still
            gives segments to stitch from.
        stitch_task: the compound task to stitch demonstrations of (None: no stitching).
        stitch_seeds: the seeds to stitch it on.
        similarity, threshold: how segments from other worlds are matched (see `stitch.plan_stitch`).
        max_steps: the step limit a stitch must fit (default the task's own).
        env_factory: builds environments by task name.
    """
    real = [e for e in episodes if e.source == "real" and e.steps]
    segments = segment_episodes(real)
    out = SynthesisResult()
    out.report.episodes_read = len(real)
    out.report.segments = len(segments)
    out.report.segments_by_skill = dict(Counter(s.skill for s in segments if s.reached))
    if relabel:
        chosen = real if relabel_only is None else [e for e in real if e.episode_id in relabel_only]
        relabelled = relabel_episodes(chosen, env_factory=env_factory)
        out.episodes += relabelled.episodes
        out.rejected += relabelled.rejected
        out.report.relabelled = relabelled.report.relabelled
        out.report.relabel_rejected = relabelled.report.relabel_rejected
        out.report.replay_env_steps += relabelled.report.replay_env_steps
    if stitch_task is not None:
        stitched = stitch(
            stitch_task,
            stitch_seeds,
            segments,
            similarity=similarity,
            threshold=threshold,
            max_steps=max_steps,
            env_factory=env_factory,
        )
        out.episodes += stitched.episodes
        out.rejected += stitched.rejected
        out.report.stitches_tried = stitched.report.stitches_tried
        out.report.stitches_validated = stitched.report.stitches_validated
        out.report.stitch_rejected = stitched.report.stitch_rejected
        out.report.replay_env_steps += stitched.report.replay_env_steps
    return out
