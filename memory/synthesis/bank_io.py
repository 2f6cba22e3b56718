"""The synthesizer's two contacts with the experience bank: reading episodes, storing synthetic ones."""

from __future__ import annotations

from typing import TYPE_CHECKING

from crl.memory.results import IngestResult
from crl.memory.trajectory import Episode

if TYPE_CHECKING:
    from crl.memory.bank import ExperienceBank


def episodes_from_bank(
    bank: ExperienceBank, family: str, *, source: str | None = "real", limit: int | None = None
) -> list[Episode]:
    """The finished episodes of `family` in the bank (quarantined ones left out), newest first.

    Args:
        bank: the experience bank to read.
        family: the task family (`keyroom`).
        source: "real", "synthetic" or None for both; synthesis builds from real experience.
        limit: at most this many episodes.
    """
    records = bank.ls(kind="episode", family=family, source=source, limit=None)
    kept = [r for r in records if r.tier != "quarantine" and r.status != "running"][:limit]
    return [bank.get(r.id).to_episode() for r in kept]


def store_synthetic(bank: ExperienceBank, episodes: list[Episode], actor: str | None = None) -> list[IngestResult]:
    """Ingest synthetic episodes into the bank (idempotent: their ids are stable).

    Raises:
        ValueError: an episode is not marked `source="synthetic"` (played episodes are stored by sync).
    """
    played = [e.episode_id for e in episodes if e.source != "synthetic"]
    if played:
        raise ValueError(f"store_synthetic stores synthetic episodes only; {played[:3]} are played ones (use sync)")
    return [bank.ingest_episode(e, actor=actor) for e in episodes]
