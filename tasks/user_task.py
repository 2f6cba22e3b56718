"""`UserTask`: the base class for a user's own task that a JSONL file cannot express.

Subclass it, set `name` (`family/variant`) and whatever else differs from the defaults,
implement `reset` and `step`, and expose the class through the `complementary_rl.tasks` entry
point of your package (see `crl.tasks.plugins`); `crl tasks` then lists it and `crl run` plays
it, with nothing of ours edited.

Example:
    >>> class Echo(UserTask):
    ...     name = "demo/echo"
    ...     description = "Say the word you are shown."
    ...     def reset(self, seed):
    ...         self.word = ["apple", "pear", "plum"][seed % 3]
    ...         return self.observe(f"Say {self.word}.")
    ...     def step(self, action):
    ...         won = action.strip().lower() == self.word
    ...         return self.finish("Right." if won else "Wrong.", success=won)
    >>> env = Echo.spec().factory()
    >>> env.reset(1).text
    'Say pear.'
    >>> env.step("pear").reward
    1.0
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from crl.tasks.base import Observation, SeedFolds, StepOutcome, TaskError, TaskSpec
from crl.tasks.places import Places
from crl.tasks.toggles import pair_toggles


class UserTask:
    """A `TextEnv` with its registration details as class attributes.

    Attributes:
        name: `family/variant`, e.g. `mytasks/sorting`.
        description: one line for `crl tasks`.
        max_steps: the agent's step limit.
        folds: the train/dev/test seed ranges (`SeedFolds()` by default).
        tools: references (`module:function`) of the tools the agent is offered.
        goal: the goal `observe` reports when the episode gave none.
        action_role: optional `(observation, action) -> role or None` (a staticmethod): what an
            action does relative to what the player sees, in words that hold in every episode
            (`TaskSpec.action_role`; memory then matches stored actions by role).
        situation: optional `observation -> text` (a staticmethod): the part of an observation that
            fixes what every action will do, so two observations with the same situation count as
            the same place for loop detection (`TaskSpec.situation`).
        repeat_undoes_reward: each point is paid once and lost by undoing what earned it, so the
            loop rules pass over an action whose reward the episode still holds
            (`TaskSpec.repeat_undoes_reward`).
        places: optional `Places` (`crl.tasks.places`): where the player is and where each listed
            move leads, so the loop rules pass over moves back to places already seen
            (`TaskSpec.places`).
        idle_actions: actions that never change anything (a "look" that only describes), counted
            idle from the first step (`TaskSpec.idle_actions`).
        inverse_action: optional `action -> the action that undoes it, or None` (a staticmethod:
            "open box" and "close box"), so the loop rules pass over repeating a change still in
            effect and undoing one made since the last reward (`crl.tasks.toggles.pair_toggles`).
        toggles: optional `(observation, action) -> (thing, state)` (a staticmethod), the full form
            of `inverse_action` for things reached from more than one place (`TaskSpec.toggles`).
        undo_never_rewarded: setting a thing back never earns a reward here, so the undo stays passed
            over after a reward too (`TaskSpec.undo_never_rewarded`).
        no_ops: optional `(observation, listed actions) -> set` (a staticmethod): the listed actions
            the observation shows would change nothing ("open box" where it says the box is open),
            counted as known no-ops before one was wasted (`TaskSpec.no_ops`).
    """

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    max_steps: ClassVar[int] = 10
    folds: ClassVar[SeedFolds] = SeedFolds()
    tools: ClassVar[tuple[str, ...]] = ()
    goal: ClassVar[str] = ""
    action_role: ClassVar[Callable[[str, str], str | None] | None] = None
    situation: ClassVar[Callable[[str], str] | None] = None
    repeat_undoes_reward: ClassVar[bool] = False
    places: ClassVar[Places | None] = None
    idle_actions: ClassVar[tuple[str, ...]] = ()
    inverse_action: ClassVar[Callable[[str], str | None] | None] = None
    undo_never_rewarded: ClassVar[bool] = False
    toggles: ClassVar[Callable[[str, str], tuple[str, str] | None] | None] = None
    no_ops: ClassVar[Callable[[str, Sequence[str]], set[str]] | None] = None

    def reset(self, seed: int) -> Observation:
        """Start the episode of `seed` and return what the agent sees first."""
        raise NotImplementedError(f"{type(self).__name__} must implement reset(seed)")

    def step(self, action: str) -> StepOutcome:
        """Play `action` (or, for a task that asks for one answer, check it)."""
        raise NotImplementedError(f"{type(self).__name__} must implement step(action)")

    def close(self) -> None:
        """Release what the task holds (nothing by default)."""

    def observe(self, text: str, goal: str | None = None, actions: list[str] | None = None) -> Observation:
        """An observation of `text`, listing `actions` when the task knows them.

        Its goal is `goal` when given (and kept for the episode's later observations), else the
        one given earlier in the episode, else the class's `goal`, else `text` itself.
        """
        if goal is not None:
            self._episode_goal = goal
        shown = getattr(self, "_episode_goal", None) or self.goal or text
        return Observation(text=text, goal=shown, admissible_actions=actions)

    def proceed(self, text: str, reward: float = 0.0, actions: list[str] | None = None, **info: Any) -> StepOutcome:
        """A step that does not end the episode."""
        return StepOutcome(self.observe(text, actions=actions), reward, False, {"success": False, **info})

    def finish(self, text: str, success: bool, reward: float | None = None, **info: Any) -> StepOutcome:
        """The step that ends the episode; reward 1.0 for a success and 0.0 otherwise unless given."""
        reward = (1.0 if success else 0.0) if reward is None else reward
        return StepOutcome(self.observe(text), reward, True, {"success": success, **info})

    @classmethod
    def spec(cls) -> TaskSpec:
        """The `TaskSpec` that registers this class (the class itself is the factory)."""
        if "/" not in cls.name:
            raise TaskError(f"{cls.__module__}.{cls.__qualname__}.name must be family/variant, got {cls.name!r}")
        return TaskSpec(
            name=cls.name,
            factory=cls,
            description=cls.description or (cls.__doc__ or cls.__qualname__).strip().splitlines()[0],
            folds=cls.folds,
            max_steps=cls.max_steps,
            tools=tuple(cls.tools),
            action_role=cls.action_role,
            situation=cls.situation,
            repeat_undoes_reward=cls.repeat_undoes_reward,
            places=cls.places,
            idle_actions=tuple(cls.idle_actions),
            toggles=cls.toggles or (pair_toggles(cls.inverse_action, cls.places) if cls.inverse_action else None),
            undo_never_rewarded=cls.undo_never_rewarded,
            no_ops=cls.no_ops,
        )
