"""Replaying a list of actions in the real environment, to validate what synthesis proposes.

Every task here is deterministic per seed, so `make_env(task).reset(seed)` and the same
actions give the same game; the replayed steps (real observations, rewards and infos) are what
a synthetic episode keeps, never text copied from the episodes it was built from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from crl.memory.trajectory import Step
from crl.tasks.base import Observation, TextEnv
from crl.tasks.registry import make_env

REPLAYED_BY = "replay"
"""The `decided_by` of a replayed step: nobody chose it live, synthesis did."""


@dataclass
class ReplayResult:
    """What replaying a list of actions did.

    Attributes:
        success: the environment reported success (`info["success"]`) by the end.
        code: the outcome in one word: "success", "invalid-action", "game-over" or "no-success".
        reason: why not ("" on success): an invalid action, a lost game, or no success by the end.
        steps: the replayed steps, as an agent would have logged them.
        goal: the goal text the environment showed.
        final_observation: the observation after the last replayed step.
        subgoals: the sub-goals reached by the end.
        env_steps: how many actions were sent to the environment.
        invalid_at: the index of the first action the environment did not accept, if any.
    """

    success: bool
    code: str
    reason: str
    steps: list[Step] = field(default_factory=list)
    goal: str = ""
    final_observation: str = ""
    subgoals: dict[str, bool] = field(default_factory=dict)
    env_steps: int = 0
    invalid_at: int | None = None

    @property
    def total_return(self) -> float:
        return sum(s.reward for s in self.steps)

    def summary(self) -> dict[str, Any]:
        """The result without its steps (for provenance)."""
        return {
            "replayed": True,
            "success": self.success,
            "code": self.code,
            "reason": self.reason,
            "env_steps": self.env_steps,
            "invalid_at": self.invalid_at,
            "subgoals": dict(self.subgoals),
            "final_observation": self.final_observation,
        }


EnvFactory = Callable[[str], TextEnv]


def replay(
    task: str,
    seed: int,
    actions: list[str],
    *,
    stop_on_invalid: bool = True,
    env_factory: EnvFactory = make_env,
) -> ReplayResult:
    """Play `actions` on a fresh `task` environment reset to `seed`.

    Stops at the first success (later actions are not sent), at a lost game, and (with
    `stop_on_invalid`) at the first action the environment does not accept; otherwise an
    invalid action is logged as an invalid step and play goes on.

    Args:
        task: the task name, knobs included (`keyroom/compound?n_rooms=3`).
        seed: the seed to reset to.
        actions: the actions to send, in order.
        stop_on_invalid: fail at the first invalid action instead of logging it and going on.
        env_factory: builds the environment from the task name (tests may pass their own).
    """
    env = env_factory(task)
    try:
        obs = env.reset(seed)
        steps: list[Step] = []
        subgoals: dict[str, bool] = {}
        invalid_at: int | None = None
        for i, action in enumerate(actions):
            out = env.step(action)
            invalid = bool(out.info.get("invalid"))
            steps.append(
                Step(
                    index=i,
                    observation=obs.text,
                    admissible_actions=obs.admissible_actions,
                    raw_output=action,
                    action=action,
                    valid=not invalid,
                    reward=float(out.reward),
                    done=bool(out.done),
                    info=dict(out.info),
                    decided_by=REPLAYED_BY,
                )
            )
            obs = out.observation
            subgoals = dict(out.info.get("subgoals") or subgoals)
            if invalid and invalid_at is None:
                invalid_at = i
                if stop_on_invalid:
                    reason = f"action {i + 1} of {len(actions)} ({action!r}) is not valid there"
                    return _result("invalid-action", reason, steps, obs, subgoals, invalid_at)
            if out.info.get("success"):
                return _result("success", "", steps, obs, subgoals, invalid_at)
            if out.done:
                reason = f"the game ended without success at action {i + 1} of {len(actions)} ({action!r})"
                return _result("game-over", reason, steps, obs, subgoals, invalid_at)
        reason = f"all {len(actions)} actions played without success"
        return _result("no-success", reason, steps, obs, subgoals, invalid_at)
    finally:
        env.close()


def _result(
    code: str, reason: str, steps: list[Step], obs: Observation, subgoals: dict[str, bool], invalid_at: int | None
) -> ReplayResult:
    return ReplayResult(
        success=code == "success",
        code=code,
        reason=reason,
        steps=steps,
        goal=obs.goal,
        final_observation=obs.text,
        subgoals=subgoals,
        env_steps=len(steps),
        invalid_at=invalid_at,
    )


def goal_of(task: str, seed: int, env_factory: EnvFactory = make_env) -> str:
    """The goal text `task` shows on `seed` (a reset; no step is played)."""
    env = env_factory(task)
    try:
        return env.reset(seed).goal
    finally:
        env.close()
