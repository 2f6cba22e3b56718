"""The task interface every environment implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class Observation:
    """What the agent sees after `reset` or `step`.

    Attributes:
        text: the environment's description of the current situation.
        goal: the task goal in plain language.
        admissible_actions: the actions the environment accepts now, when it knows them.
    """

    text: str
    goal: str
    admissible_actions: list[str] | None = None


@dataclass
class StepOutcome:
    """The result of one `step`: the `(observation, reward, done, info)` tuple as a record."""

    observation: Observation
    reward: float
    done: bool
    info: dict[str, Any] = field(default_factory=dict)

    def __iter__(self):
        return iter((self.observation, self.reward, self.done, self.info))


@runtime_checkable
class TextEnv(Protocol):
    """A text environment: `reset(seed)` then `step(action)` until done.

    `info` from `step` carries at least `success` (bool) and, where the task has them,
    `subgoals` (a dict of sub-goal name to whether it has been reached so far) and
    `invalid` (True when the action was not understood or not allowed).
    """

    name: str

    # Optional: `valid_actions() -> list[str]` for tasks whose observations do not list their
    # admissible actions (too many to show, ScienceWorld) but can enumerate them; the random
    # baseline (`--policy random`) draws from it.

    def reset(self, seed: int) -> Observation: ...

    def step(self, action: str) -> StepOutcome: ...

    def close(self) -> None: ...
