"""Where a synthetic episode came from: its kind, its parents and how it was validated.

`Episode` has no provenance field yet, so the provenance travels in the first step's extras
(`steps[0].extra.unknown["provenance"]`), which episode logs and the bank keep as they are;
`provenance_of` reads it back from there (or from an `Episode.provenance` attribute, once the
record has one).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from crl.memory.synthesis.replay import ReplayResult
from crl.memory.trajectory import Episode

SYNTHESIS_RUN_ID = "synthesis"
"""The `run_id` of every synthetic episode (they belong to no run)."""

Kind = Literal["relabel", "stitch"]


@dataclass
class Provenance:
    """How a synthetic episode was made.

    Attributes:
        kind: "relabel" (a failure's achieved sub-goal made a success) or "stitch" (segments joined).
        parents: the parent episode ids, one per part (a stitch may repeat an id).
        parts: per part, the segment it used (episode id, task, seed, skill, step range), the bridge
            actions played before it and how its start was matched.
        validation: the replay's summary (`ReplayResult.summary`).
        created_at: when it was made (UNIX seconds).
    """

    kind: Kind
    parents: list[str]
    parts: list[dict[str, Any]] = field(default_factory=list)
    validation: dict[str, Any] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        """The stored form."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Provenance:
        """The provenance from its stored form."""
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


def attach(episode: Episode, provenance: Provenance) -> Episode:
    """Record `provenance` on `episode` (`Episode.provenance`) and return the episode."""
    episode.provenance = provenance.to_dict()
    return episode


def provenance_of(episode: Episode) -> Provenance | None:
    """The provenance recorded on `episode`, or None for an episode that was played."""
    return Provenance.from_dict(episode.provenance) if episode.provenance else None


def synthetic_episode_id(kind: Kind, task: str, seed: int, parents: list[str], actions: list[str]) -> str:
    """A stable id: the same synthesis from the same parents gets the same id (the bank's ingest
    is idempotent by id, so running synthesis twice stores nothing twice)."""
    blob = json.dumps([kind, task, seed, parents, actions], separators=(",", ":"))
    return f"syn-{kind}-{hashlib.sha1(blob.encode()).hexdigest()[:12]}"


def synthetic_episode(task: str, seed: int, replayed: ReplayResult, provenance: Provenance) -> Episode:
    """A successful synthetic episode of `task` on `seed` made of the replayed steps, with its provenance."""
    actions = [s.action for s in replayed.steps]
    now = time.time()
    episode = Episode(
        episode_id=synthetic_episode_id(provenance.kind, task, seed, provenance.parents, actions),
        run_id=SYNTHESIS_RUN_ID,
        task=task,
        seed=seed,
        goal=replayed.goal,
        source="synthetic",
        steps=replayed.steps,
        status="done",
        success=replayed.success,
        total_return=replayed.total_return,
        subgoals=dict(replayed.subgoals),
        end_reason=f"synthetic ({provenance.kind}), validated by replay",
        started_at=provenance.created_at,
        ended_at=now,
    )
    return attach(episode, provenance)
