"""Which steps a won episode needed: replaying it with a step left out still wins, so that step was not.

Loop erasure (`memory.ingest.loop_erased_detours`) drops the steps a winning episode later came
back around. It keeps every step that changed the state for good, needed or not: the take of a
vase carried to the end. Every task here is deterministic per seed, so the real
environment can say which steps the win needed: replay the actions with one left out; if the game
is still won (no action refused on the way), that step was not needed and stays out. Greedily,
from the last step back, then the same with two neighbouring steps at once (a drop and the take
that undoes it, a step out and back), until a whole pass leaves nothing more out: leaving out any
one more kept step, or two neighbours, loses the game or has an action refused. That is not
necessarily the shortest plan. A take of a vase later dropped goes in two moves: the drop first
(carrying the vase on is harmless), then the take.

Each replay costs one episode of environment steps; `needed_steps` reuses one environment for all
of them. An episode whose recorded actions do not win again on replay (a task that is not
deterministic, or a record without its seed) is left as it was: every step counts as needed.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from crl.memory.ingest import step_detours
from crl.memory.synthesis.replay import EnvFactory, replay
from crl.memory.trajectory import Episode, Step
from crl.tasks.base import TextEnv
from crl.tasks.registry import make_env


@dataclass
class Needed:
    """What leaving steps out found for one episode.

    Attributes:
        kept: positions (into the actions given) of the steps the win needed.
        replayed: whether the actions given won on replay at all (if not, `kept` is every position).
        env_steps: environment steps spent on the replays.
        reason: why nothing was left out, when the first replay did not win.
        left_out: the positions the win did not need.
    """

    kept: list[int]
    replayed: bool
    env_steps: int = 0
    reason: str = ""
    left_out: list[int] = field(default_factory=list)


class _Reused:
    """One environment for every replay of an episode (`replay` closes what its factory gives)."""

    def __init__(self, env: TextEnv) -> None:
        self.env = env

    def __getattr__(self, name: str):
        return getattr(self.env, name)

    def close(self) -> None:
        pass


def needed_steps(
    task: str,
    seed: int,
    actions: Sequence[str],
    candidates: Sequence[int] | None = None,
    env_factory: EnvFactory = make_env,
) -> Needed:
    """The steps of a won episode that its win needed (module docstring).

    Args:
        task, seed: the game the actions were played in.
        actions: every action of the episode, in order.
        candidates: the positions to start from (e.g. the loop-erased path, invalid steps left
            out); None: every position. When these do not win on replay, every position is tried.
        env_factory: builds the environment (tests pass their own).

    Returns:
        `Needed`: the positions kept, in order, and what the replays cost.

    Example (a scripted game that needs "a" then "c"; "b" changes nothing):
        >>> from crl.tasks.base import Observation, StepOutcome
        >>> class Game:
        ...     def reset(self, seed): self.done = []; return Observation("start", "win", ["a", "b", "c"])
        ...     def step(self, a):
        ...         self.done.append(a); won = [x for x in self.done if x != "b"] == ["a", "c"]
        ...         return StepOutcome(Observation(str(self.done), "win", ["a", "b", "c"]), float(won), won,
        ...                            {"success": won, "invalid": False})
        ...     def close(self): pass
        >>> needed_steps("game", 0, ["b", "a", "b", "c"], env_factory=lambda t: Game()).kept
        [1, 3]
    """
    env = _Reused(env_factory(task))
    spent = 0

    def winning(positions: list[int]) -> list[int] | None:
        """The positions played up to the win (a win before the last leaves the rest out), or None."""
        nonlocal spent
        result = replay(task, seed, [actions[i] for i in positions], env_factory=lambda _t: env)
        spent += result.env_steps
        return positions[: result.env_steps] if result.success else None

    try:
        everything = list(range(len(actions)))
        kept = winning(sorted(candidates) if candidates is not None else everything)
        if kept is None and candidates is not None:
            kept = winning(everything)
        if kept is None:
            return Needed(everything, False, spent, "the recorded actions do not win again on replay")
        changed = True
        while changed:
            changed = False
            for width in (1, 2):
                for at in range(len(kept) - width, -1, -1):
                    if at + width > len(kept):
                        continue
                    trial = winning(kept[:at] + kept[at + width :])
                    if trial is not None:
                        kept, changed = trial, True
        return Needed(kept, True, spent, left_out=[i for i in everything if i not in kept])
    finally:
        env.env.close()


def unneeded_steps(
    task: str, seed: int, steps: Sequence[Step], detours: Collection[int] = ()
) -> tuple[set[int], Needed]:
    """The `Step.index`es of a won episode's steps its win did not need, and what the replays found.

    The replays start from the valid steps not in `detours` (the loop-erased path); an episode that
    does not win again on replay has no unneeded steps.
    """
    ordered = sorted(steps, key=lambda st: st.index)
    candidates = [i for i, st in enumerate(ordered) if st.valid and st.action and st.index not in detours]
    found = needed_positions(task, seed, [st.action for st in ordered], candidates)
    return ({ordered[i].index for i in found.left_out} if found.replayed else set()), found


def episode_unneeded(episode: Episode) -> set[int]:
    """The steps a won episode's win did not need, replayed from its loop-erased path (`memory.minimal_credit`)."""
    return unneeded_steps(episode.task, episode.seed, episode.steps, step_detours(episode.task, episode.steps))[0]


def needed_positions(task: str, seed: int, actions: Sequence[str], candidates: Sequence[int] | None = None) -> Needed:
    """`needed_steps` with the task's real environment; an environment that cannot be built (a task
    whose plugin is not installed here) leaves every step as needed, with the reason."""
    try:
        return needed_steps(task, seed, actions, candidates)
    except (ValueError, KeyError, OSError, RuntimeError) as exc:
        return Needed(list(range(len(actions))), False, 0, f"not replayable here: {exc}")


__all__ = ["Needed", "episode_unneeded", "needed_positions", "needed_steps", "unneeded_steps"]
