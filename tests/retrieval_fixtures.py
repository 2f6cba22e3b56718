"""Fixtures for the retriever, episodic-control and credit tests: banks, episodes and records.

Banks are embedded, in a fresh temporary directory, with the hashing fake embedding, so
texts sharing no word have similarity about 0 and identical texts exactly 1.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from crl.memory.bank import ExperienceBank
from crl.memory.config import MemoryConfig
from crl.memory.records import EpisodeRecord, StepRecord, episode_record_id, step_record_id
from crl.memory.storage.embeddings import HashingEmbedding
from crl.memory.trajectory import Episode, Step
from tests.chroma_server import no_default_embedding  # noqa: F401  (autouse guard)

GOAL = "Find the brass key and take it."
HALL = "You are in the hall. You see a brass key. Exits: north."


class CountingEmbedding(HashingEmbedding):
    """The hashing fake, counting its calls (to check that retrieval batches)."""

    def __init__(self, dim: int = 64):
        super().__init__(dim)
        self.calls: list[int] = []

    @staticmethod
    def name() -> str:
        return "crl-hashing-counting"  # its own name: Chroma registers the class a collection is made with

    def embed(self, texts):
        self.calls.append(len(texts))
        return super().embed(texts)


def open_test_bank(path: Path, embedder=None, **fields) -> ExperienceBank:
    """An embedded bank under `path` with the hashing embedding and fsync off."""
    fields.setdefault("fsync_journal", False)
    return ExperienceBank(
        path / "memory", path / "runs", MemoryConfig(**fields), embedder=embedder or HashingEmbedding(64), actor="test"
    )


@pytest.fixture
def bank(tmp_path):
    """A fresh embedded bank, closed after the test."""
    b = open_test_bank(tmp_path)
    yield b
    b.close()


def episode(
    run_id: str,
    i: int,
    actions: Sequence[str],
    success: bool,
    observations: Sequence[str] | None = None,
    task: str = "keyroom/key",
    goal: str = GOAL,
    valid: Sequence[bool] | None = None,
    finished: bool = True,
    started_at: float | None = None,
) -> Episode:
    """An episode playing `actions` after `observations` (default: one distinct room per step)."""
    start = started_at if started_at is not None else time.time() - 3600 + i
    ep = Episode(episode_id=f"{run_id}-{i:04d}", run_id=run_id, task=task, seed=i, goal=goal, model="scripted")
    for t, action in enumerate(actions):
        last = finished and t == len(actions) - 1
        obs = observations[t] if observations else f"You are in room {run_id} {i} {t}."
        ep.steps.append(
            Step(
                index=t,
                observation=obs,
                action=action,
                valid=True if valid is None else valid[t],
                reward=1.0 if success and last else 0.0,
                done=last,
                time=start + t,
            )
        )
    ep.started_at = start
    if finished:
        ep.status = "done" if success else "truncated"
        ep.success = success
        ep.total_return = 1.0 if success else 0.0
        ep.ended_at = start + len(actions)
    return ep


def step_record(
    episode_id: str,
    index: int,
    action: str,
    outcome: str = "success",
    length: int | None = None,
    valid: bool = True,
    repeated: bool = False,
    subgoal_in: int | None = None,
    family: str = "keyroom",
    detour: bool = False,
    observation: str = HALL,
    uses: int = 0,
    wins: int = 0,
    value: float = 0.5,
    created_at: float = 1_700_000_000.0,
) -> StepRecord:
    """A step record built directly (pure tests of ranking and values)."""
    return StepRecord(
        id=step_record_id(family, episode_id, index),
        episode_id=episode_id,
        run_id="r",
        task=f"{family}/key",
        family=family,
        variant="key",
        seed=0,
        index=index,
        goal=GOAL,
        observation=observation,
        action=action,
        valid=valid,
        episode_outcome=outcome,
        episode_return=1.0 if outcome == "success" else 0.0,
        novelty=0.0,
        episode_length=length if length is not None else index + 1,
        repeated=repeated,
        detour=detour,
        subgoal_in=subgoal_in,
        use_count=uses,
        use_successes=wins,
        value=value,
        verified=True,  # a played step: its outcome came from the environment
        created_at=created_at,
        updated_at=created_at,
    )


def episode_record(
    episode_id: str,
    success: bool = True,
    length: int = 3,
    uses: int = 0,
    wins: int = 0,
    value: float = 0.5,
    novelty: float = 0.0,
    created_at: float = 1_700_000_000.0,
) -> EpisodeRecord:
    """An episode record built directly (pure tests of ranking)."""
    return EpisodeRecord(
        id=episode_record_id("keyroom", episode_id),
        episode_id=episode_id,
        run_id="r",
        task="keyroom/key",
        family="keyroom",
        variant="key",
        seed=0,
        goal=GOAL,
        status="done" if success else "truncated",
        outcome="success" if success else "failure",
        success=success,
        total_return=float(success),
        length=length,
        reward_sparsity=1.0,
        novelty=novelty,
        text=f"Goal: {GOAL}\nObservation: {HALL}",
        use_count=uses,
        use_successes=wins,
        utility=(wins + 1) / (uses + 2),
        value=value,
        verified=True,
        created_at=created_at,
        updated_at=created_at,
    )
