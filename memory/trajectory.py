"""Trajectory records: what happened in one episode, step by step.

These are the records the agent writes to the per-run episode log and that the experience
bank is built from. They know nothing of the agent that produced them.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

LOG_SCHEMA_VERSION = 1


@dataclass
class Step:
    """One agent step.

    Attributes:
        index: 0-based position in the episode.
        observation: the observation text the agent acted on.
        admissible_actions: what the environment accepted at that point, when known.
        raw_output: the model's reply exactly as generated.
        thought: the parsed thought ("" when the reply had none).
        action: the action sent to the environment ("" when the reply could not be parsed).
        valid: False when the reply was unparseable or inadmissible (an "invalid action" step).
        reward: reward returned by the environment for this step.
        done: whether the episode ended with this step.
        info: the environment's info dict (sub-goals, success, ...).
        prompt_tokens / completion_tokens: token accounting for this step's generation.
        latency_s: wall time of generation for this step (shared by the batch it was in).
        decided_by: which policy chose the action ("llm", "memory", "scripted", "random", ...).
        extra: anything else worth keeping (memories used, score breakdowns, parse notes).
        time: when the step was logged (UNIX seconds).
    """

    index: int
    observation: str
    action: str
    raw_output: str = ""
    thought: str = ""
    admissible_actions: list[str] | None = None
    valid: bool = True
    reward: float = 0.0
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    decided_by: str = "llm"
    extra: dict[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Step":
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass
class Episode:
    """One episode: who played what, every step, and how it ended.

    `status` is "running" until the episode ends, then "done" (the environment said so),
    "truncated" (a guard stopped it: max steps, token budget, wall clock) or "error".
    """

    episode_id: str
    run_id: str
    task: str
    seed: int
    goal: str
    model: str = ""
    adapter: str | None = None
    source: str = "real"
    steps: list[Step] = field(default_factory=list)
    status: str = "running"
    success: bool = False
    total_return: float = 0.0
    subgoals: dict[str, bool] = field(default_factory=dict)
    end_reason: str = ""
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None

    @property
    def family(self) -> str:
        return self.task.split("/", 1)[0]

    @property
    def variant(self) -> str:
        return self.task.split("?", 1)[0].split("/", 1)[-1]

    @property
    def finished(self) -> bool:
        return self.status != "running"

    @property
    def invalid_steps(self) -> int:
        return sum(1 for s in self.steps if not s.valid)

    def header(self) -> dict[str, Any]:
        """The fields that describe the episode without its steps or outcome."""
        return {
            "episode_id": self.episode_id,
            "run_id": self.run_id,
            "task": self.task,
            "seed": self.seed,
            "goal": self.goal,
            "model": self.model,
            "adapter": self.adapter,
            "source": self.source,
            "started_at": self.started_at,
        }

    def outcome(self) -> dict[str, Any]:
        """The fields written when the episode ends."""
        return {
            "status": self.status,
            "success": self.success,
            "total_return": self.total_return,
            "subgoals": self.subgoals,
            "end_reason": self.end_reason,
            "ended_at": self.ended_at,
            "n_steps": len(self.steps),
        }

    def to_dict(self) -> dict[str, Any]:
        d = self.header() | self.outcome()
        d["steps"] = [s.to_dict() for s in self.steps]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Episode":
        known = cls.__dataclass_fields__
        ep = cls(**{k: v for k, v in d.items() if k in known and k != "steps"})
        ep.steps = [Step.from_dict(s) for s in d.get("steps", [])]
        return ep
