"""What a step was for: the sub-goal it worked toward, so experience of a skill votes wherever that
skill comes next (the seed's section 6: tag experience by task and skill, condition on it).

A task that declares a sub-goal order (`TaskSpec.subgoal_order`, e.g. keyroom's key, door, chest)
gives every step a *purpose*:

- a sub-task whose whole goal is one of those sub-goals (`keyroom/door`) works toward it at every
  step; the sub-goals before it in the order are given at the start (the door task starts with
  the key in hand), so no step is credited with reaching them;
- a compound task (`keyroom/compound`) works at each step toward the first sub-goal of the order
  not reached before that step: the key, then the door, then the chest;
- a task that declares no order has no purpose (`None`): its experience is conditioned on the
  task, as before.

`purpose_in` is how many steps after a step its purpose was reached (0: by this very step), None
when the episode ended without reaching it. `purpose_view` turns a stored step into the episode of
its purpose: a success iff the purpose was reached, ending where it was reached, so episodic
control values an action by whether it led to the skill it was for, and a door step of a failed
compound episode that opened the door counts as what it is, a door success.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crl.memory.records import StepRecord


def _order_and_own(task: str) -> tuple[tuple[str, ...], str | None]:
    from crl.memory.synthesis.task_skills import family_of, subgoal_order
    from crl.tasks.registry import get_task, parse_task_name

    order = subgoal_order(task)
    if not order:
        return (), None
    base, _ = parse_task_name(task)
    declared = get_task(base).subtasks
    own = next((s for s in order if (declared.get(s) or f"{family_of(base)}/{s}") == base), None)
    return order, own


def own_skill(task: str) -> str | None:
    """The sub-goal that is `task`'s whole goal (`keyroom/door` -> "door"); None for a compound task
    or one that declares no order.

    Example:
        >>> own_skill("keyroom/door?n_rooms=3"), own_skill("keyroom/compound")
        ('door', None)
    """
    return _order_and_own(task)[1]


def given_subgoals(task: str) -> tuple[str, ...]:
    """The sub-goals a sub-task starts with: those before its own in the declared order.

    Example:
        >>> given_subgoals("keyroom/chest"), given_subgoals("keyroom/compound")
        (('key', 'door'), ())
    """
    order, own = _order_and_own(task)
    return order[: order.index(own)] if own else ()


def purpose_now(task: str, reached: Iterable[str]) -> str | None:
    """What a step of `task` works toward when the sub-goals `reached` have been reached so far.

    Example:
        >>> purpose_now("keyroom/compound", ["key"]), purpose_now("keyroom/door", [])
        ('door', 'door')
    """
    order, own = _order_and_own(task)
    if own:
        return own
    done = set(reached)
    return next((s for s in order if s not in done), None)


def reached_subgoals(info: Mapping[str, Any] | None) -> set[str]:
    """The sub-goals a step's `info["subgoals"]` reports as reached."""
    subgoals = info.get("subgoals") if isinstance(info, Mapping) else None
    return {str(k) for k, v in subgoals.items() if v} if isinstance(subgoals, Mapping) else set()


def step_purposes(task: str, infos: Sequence[Mapping[str, Any] | None]) -> list[tuple[str | None, int | None]]:
    """(purpose, purpose_in) of each step of an episode of `task`, from the steps' infos in order.

    Example (a compound episode: take key, drop it, take it again, unlock, open):
        >>> sg = lambda k, d: {"subgoals": {"key": k, "door": d, "chest": False}}
        >>> step_purposes("keyroom/compound", [sg(1, 0), sg(1, 0), sg(1, 0), sg(1, 0), sg(1, 1)])
        [('key', 0), ('door', 3), ('door', 2), ('door', 1), ('door', 0)]
    """
    order, own = _order_and_own(task)
    if not order:
        return [(None, None)] * len(infos)
    reached = set(given_subgoals(task))
    purposes: list[str | None] = []
    after: list[set[str]] = []
    for info in infos:
        purposes.append(own or next((s for s in order if s not in reached), None))
        reached |= reached_subgoals(info)
        after.append(set(reached))
    out: list[tuple[str | None, int | None]] = []
    for i, purpose in enumerate(purposes):
        when = None if purpose is None else next((j for j in range(i, len(after)) if purpose in after[j]), None)
        out.append((purpose, None if when is None else when - i))
    return out


def purpose_view(step: StepRecord) -> StepRecord:
    """`step` as a step of the episode of its purpose: a success ending `purpose_in` steps later when
    the purpose was reached, else the episode's own failure (an unfinished episode stays unfinished);
    no sub-goal credit on top (reaching the purpose is the success). A step with no purpose is
    returned as it is."""
    if step.purpose is None or step.episode_outcome == "unfinished":
        return step
    if step.purpose_in is None:
        return step.model_copy(update={"episode_outcome": "failure", "subgoal_in": None})
    return step.model_copy(
        update={"episode_outcome": "success", "episode_length": step.index + 1 + step.purpose_in, "subgoal_in": None}
    )


def for_purpose(neighbours: Sequence[tuple[StepRecord, float]], purpose: str) -> list[tuple[StepRecord, float]]:
    """The neighbours stored while working toward `purpose`, each as the episode of its purpose
    (`purpose_view`), in whichever task of the family they were played."""
    return [(purpose_view(step), sim) for step, sim in neighbours if step.purpose == purpose]
