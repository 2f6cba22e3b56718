"""Read the episodes a dataset is built from out of the experience bank, with the quality filters.

Quarantined episodes (and quarantined steps) never become training data; synthetic episodes
only when accepted (see `FinetuneConfig.synthetic`): pinned golden, tagged, or validated by
replaying them to a success in the real environment. That last one is what the synthesizer
does to every stitched and relabelled episode before storing it (`provenance.validation`),
and an environment-verified outcome is what a success means everywhere else; 'curated' asks
for a person's acceptance instead. Everything left out is counted by reason, so the dataset
card says what was filtered and why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from crl.finetune.config import FinetuneConfig
from crl.finetune.prompt_replay import PromptShape, load_prompt_shape
from crl.memory.records import EpisodeRecord, counts_as_success, step_record_id
from crl.memory.trajectory import Step


class EpisodeSource(Protocol):
    """The part of `memory.bank.ExperienceBank` datasets are built from."""

    runs_dir: Path | None

    def ls(self, kind: str = "episode", **filters: Any) -> list[Any]: ...

    def get(self, ref: str) -> Any: ...

    def embed(self, texts: list[str]) -> np.ndarray: ...


@dataclass
class SourceEpisode:
    """A stored episode with its trajectory and the prompt shape of the run that played it."""

    record: EpisodeRecord
    steps: list[Step]
    shape: PromptShape | None
    quarantined_steps: set[int] = field(default_factory=set)

    @property
    def id(self) -> str:
        return self.record.id

    def step_id(self, index: int) -> str:
        return step_record_id(self.record.family, self.record.episode_id, index)


def exclusion_reason(record: EpisodeRecord, config: FinetuneConfig) -> str | None:
    """Why an episode may not be trained on at all, or None when it may. A synthetic episode must
    be accepted (replay-validated, or curated: golden or the accepted tag); any other success
    counts only when the environment verified it or a curator accepted it, so a record that
    merely claims success (an unreviewed import, a forged row) is never taught."""
    if record.tier == "quarantine":
        return "quarantined"
    if record.outcome == "unfinished":
        return "unfinished"
    curated = record.tier == "golden" or config.accepted_tag in record.tags
    if record.source == "synthetic":
        if config.synthetic == "none":
            return "synthetic"
        if config.synthetic == "curated" and not curated:
            return "synthetic-not-accepted"
        if config.synthetic == "accepted" and not (curated or replay_validated(record)):
            return "synthetic-not-accepted"
    elif record.success and not (counts_as_success(record) or curated):
        return "unverified-success"
    return None


def replay_validated(record: EpisodeRecord) -> bool:
    """Whether a synthetic episode's provenance says it was replayed to a success in the real environment.

    Example:
        >>> from types import SimpleNamespace
        >>> replay_validated(SimpleNamespace(provenance={"validation": {"replayed": True, "success": True}}))
        True
    """
    validation = (record.provenance or {}).get("validation") or {}
    return validation.get("replayed") is True and validation.get("success") is True


def qualifies_for_sft(record: EpisodeRecord, config: FinetuneConfig) -> str | None:
    """Why an episode is not SFT material (None when it is): it must be usable, successful and valuable enough."""
    reason = exclusion_reason(record, config)
    if reason:
        return reason
    if not record.success:
        return "not-successful"
    if record.value < config.min_value:
        return "below-min-value"
    return None


@dataclass
class LoadedEpisodes:
    """Episodes read from the bank and the count of those left out, by reason."""

    episodes: list[SourceEpisode]
    dropped: Counter


def load_episodes(
    bank: EpisodeSource,
    config: FinetuneConfig,
    family: str | None = None,
    tasks: Iterable[str] | None = None,
    successes_only: bool = False,
) -> LoadedEpisodes:
    """Usable episodes of `family` (or all families), with trajectories, oldest first.

    Args:
        bank: the experience bank.
        config: filters (`min_value`, `synthetic`, ...).
        family: task family to read, or None for all.
        tasks: keep only these tasks (`family/variant`), when given.
        successes_only: apply the SFT filter (success and `min_value`) instead of the
            general one (DPO needs failures too).
    """
    wanted = set(tasks) if tasks else None
    dropped: Counter = Counter()
    quarantined_steps = _quarantined_steps(bank, family)
    episodes: list[SourceEpisode] = []
    for summary in sorted(bank.ls(kind="episode", family=family), key=lambda r: (r.created_at, r.id)):
        if wanted is not None and summary.task not in wanted:
            continue
        reason = (qualifies_for_sft if successes_only else exclusion_reason)(summary, config)
        if reason:
            dropped[reason] += 1
            continue
        record = bank.get(summary.id)
        steps = [Step.from_dict(s.model_dump()) for s in record.trajectory]
        if not steps:
            dropped["no-steps"] += 1
            continue
        shape = load_prompt_shape(bank.runs_dir, record.run_id, steps)
        episode = SourceEpisode(record, steps, shape, quarantined_steps.get(record.id, set()))
        episodes.append(episode)
    return LoadedEpisodes(episodes, dropped)


def _quarantined_steps(bank: EpisodeSource, family: str | None) -> dict[str, set[int]]:
    from crl.memory.records import episode_of_step

    out: dict[str, set[int]] = {}
    for step in bank.ls(kind="step", family=family, tier="quarantine"):
        out.setdefault(episode_of_step(step.id), set()).add(step.index)
    return out


def quarantined_ids(bank: EpisodeSource) -> set[str]:
    """Record ids (episodes and steps) now in quarantine, to flag adapters trained on them."""
    ids = {r.id for r in bank.ls(kind="episode", tier="quarantine")}
    ids |= {r.id for r in bank.ls(kind="step", tier="quarantine")}
    return ids
