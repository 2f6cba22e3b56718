"""The task interface every environment implements."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from crl.tasks.places import Places


class TaskError(Exception):
    """A task could not be built or played; the message says why and what to do."""


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
    # Optional: `game_id() -> str | None` after `reset`, equal for seeds that start the same game
    # (`crl.tasks.game_identity`); `crl compare` then counts each distinct game once.

    def reset(self, seed: int) -> Observation: ...

    def step(self, action: str) -> StepOutcome: ...

    def close(self) -> None: ...


FOLDS = ("train", "dev", "test")


@dataclass(frozen=True)
class SeedFolds:
    """Disjoint seed ranges: `train` for collecting experience, `dev` for gating, `test` for reports."""

    train: range = range(0, 100_000)
    dev: range = range(100_000, 101_000)
    test: range = range(200_000, 201_000)

    def get(self, fold: str) -> range:
        if fold not in FOLDS:
            raise ValueError(f"unknown fold {fold!r}; choose one of {', '.join(FOLDS)}")
        return getattr(self, fold)


@dataclass(frozen=True)
class TaskSpec:
    """A named task: `family/variant`, a factory, its folds and a one-line description.

    `uses_cache_dir`: the factory takes `cache_dir=` (where generated games are kept); the
    agent passes `<home>/games`. `subgoal_order`: the order of the sub-goals in
    `info["subgoals"]` a compound goal needs; `subtasks`: per sub-goal, the task whose whole
    goal it is (experience synthesis cuts, relabels and stitches by them). `tools`: references
    (`module:function` or `path/to/file.py:function`) of the tools the task offers its agent by
    default; the agent resolves them, the task only names them. `uses_judge`: the factory takes
    `judge=` (a function sending one prompt to a model and returning its reply) and `judge_model=`
    (that model's name), for tasks whose success an LLM judges; the agent passes the run's model.
    `action_role`: `(observation, action) -> role or None`, what an action does relative to what
    the player sees, in words that hold in every world of the task ("go through the open door"
    where the compass word differs from world to world); episodic control matches stored actions
    to admissible ones by role where both have one (`memory.retrieval.action_roles`).
    `situation`: `observation -> text`, the part of an observation that fixes what every action will
    do (keyroom drops the line saying what the last action did), so "take vase" then "drop vase"
    returns to the situation it started from and the agent's loop rules see it
    (`crl.tasks.situations`); None: the whole observation. `repeat_undoes_reward`: each point is
    paid once and lost again by undoing what earned it (twc: take a shirt +, put it in the basket +,
    take it back out -), so the loop rules pass over an action whose reward the episode still holds.
    `places`: where the player is and where each listed move leads, as the observation names them
    (`crl.tasks.places`), so the loop rules pass over moves back to places already seen.
    `idle_actions`: actions that never change anything in any world of the task (TextWorldExpress's
    "look around" and "inventory", which only describe): with `agent.idle_actions` they count as
    idle from the first step, before one was wasted to learn it.
    `toggles`: `(observation, action) -> (thing, state)` or None, the thing an action sets and the state
    it sets it to, named alike from wherever it is taken (TextWorldExpress: ("door between the bedroom
    and the corridor", "open")): with `agent.undos` the loop rules pass over setting a thing to the
    state the episode already set it to and over setting back one it changed since the last reward
    (`crl.tasks.toggles`). `undo_never_rewarded`: setting a thing back never earns a reward in any world
    of the task (TextWorldExpress: no game pays for closing what it opened), so those loop rules keep
    passing over the undo after a reward too, instead of only until the next one.
    `no_ops`: `(observation, listed actions) -> those the observation shows would change nothing`
    (TextWorldExpress: opening a door it describes as open, closing or walking through one it
    describes as closed): with `agent.idle_actions` the loop rules count them as known no-ops before
    one was wasted to learn it (`crl.tasks.situations.declared_no_ops`).
    """

    name: str
    factory: Callable[..., "TextEnv"]
    description: str
    folds: SeedFolds = field(default_factory=SeedFolds)
    max_steps: int = 20
    uses_cache_dir: bool = False
    subgoal_order: tuple[str, ...] = ()
    subtasks: dict[str, str] = field(default_factory=dict)
    tools: tuple[str, ...] = ()
    uses_judge: bool = False
    action_role: Callable[[str, str], str | None] | None = None
    situation: Callable[[str], str] | None = None
    repeat_undoes_reward: bool = False
    places: Places | None = None
    idle_actions: tuple[str, ...] = ()
    toggles: Callable[[str, str], tuple[str, str] | None] | None = None
    undo_never_rewarded: bool = False
    no_ops: Callable[[str, Sequence[str]], set[str]] | None = None

    @property
    def family(self) -> str:
        return self.name.split("/", 1)[0]

    @property
    def variant(self) -> str:
        return self.name.split("/", 1)[1]
