"""What the synthesizer needs to know about a task's skills: their order and their sub-tasks.

A task declares both on its `TaskSpec` (`subgoal_order`: the sub-goals of its compound goal
in the order they must be reached; `subtasks`: sub-goal name -> the task that has it as its
whole goal). Without `subtasks`, the sub-task of skill `s` in family `f` is the task `f/s` when
it exists.

A task that declares no order may still report sub-goals: TextWorldExpress reports each point of
its raw score as `score_1` ... `score_N` (N varies by world). Those are *points*: `score_k` means
"k points so far", not a named skill, so a segment that gained one point can stand for whichever
point a stitch needs next, and the points a world needs are read from what its episodes report
(`reported_subgoals`). Stitching such a task composes points gained in different attempts on the
same world (`stitch_order`, `is_point`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from crl.tasks.registry import get_task, parse_task_name

if TYPE_CHECKING:
    from crl.memory.trajectory import Episode

POINT = re.compile(r"score_(\d+)")
"""The name of a score point: `score_<k>`, reached once the raw score has reached k."""

SHARED_WORLDS = frozenset({"keyroom"})
"""Families whose variants play the same world for the same seed and knobs."""


def family_of(task: str) -> str:
    """The family of a task name (`keyroom/compound?n_rooms=3` -> `keyroom`)."""
    return task.split("/", 1)[0]


def subgoal_order(task: str) -> tuple[str, ...]:
    """The declared order of `task`'s sub-goals, or () when it declares none.

    Example:
        >>> subgoal_order("keyroom/compound?n_rooms=3")
        ('key', 'door', 'chest')
    """
    try:
        return tuple(get_task(task).subgoal_order)
    except ValueError:
        return ()


def stitchable(task: str) -> bool:
    """Whether `task` is a compound goal to stitch: it declares a sub-goal order and is not itself
    the sub-task of one of those sub-goals (`keyroom/key` declares the family's order, but its
    whole goal is the key).

    Example:
        >>> stitchable("keyroom/compound"), stitchable("keyroom/key")
        (True, False)
    """
    order = subgoal_order(task)
    base, _ = parse_task_name(task)
    declared = get_task(base).subtasks if order else {}
    return bool(order) and all((declared.get(s) or f"{family_of(base)}/{s}") != base for s in order)


def declares_order(task: str) -> bool:
    """Whether `task` itself (or its family's sub-tasks) declares a sub-goal order."""
    return bool(subgoal_order(task))


def can_stitch(task: str) -> bool:
    """Whether stitching `task` makes sense: it is a compound task with a declared order, or it
    declares no order at all (its episodes' reported sub-goals give it, see `stitch_order`);
    a sub-task of a declared order (`keyroom/key`) is not.

    Example:
        >>> can_stitch("keyroom/compound"), can_stitch("keyroom/key"), can_stitch("twx/twc")
        (True, False, True)
    """
    return stitchable(task) or not declares_order(task)


def is_point(name: str) -> bool:
    """Whether a sub-goal name is a score point (`score_3`), or points joined by `+`.

    Example:
        >>> is_point("score_3"), is_point("score_1+score_2"), is_point("key")
        (True, True, False)
    """
    return all(POINT.fullmatch(part) for part in name.split("+"))


def reported_subgoals(subgoals: Mapping[str, bool] | None) -> tuple[str, ...]:
    """The sub-goal names a step or episode reports, in their reported order (points by number).

    Example:
        >>> reported_subgoals({"score_10": False, "score_2": True, "score_1": True})
        ('score_1', 'score_2', 'score_10')
    """
    names = list(subgoals or {})
    if names and all(POINT.fullmatch(n) for n in names):
        names.sort(key=lambda n: int(POINT.fullmatch(n).group(1)))
    return tuple(names)


def episode_subgoals(episode: Episode) -> tuple[str, ...]:
    """The sub-goals `episode` reports: those of the last step that reported any (the environment's
    whole list), else the episode's record (a stored record may keep only those reached)."""
    for step in reversed(episode.steps):
        if isinstance(step.info.get("subgoals"), dict) and step.info["subgoals"]:
            return reported_subgoals(step.info["subgoals"])
    return reported_subgoals(episode.subgoals)


def stitch_order(task: str, reported: Iterable[tuple[str, ...]] = ()) -> tuple[str, ...]:
    """The sub-goals a stitch of `task` must reach, in order: the declared order, else the longest
    list of sub-goals its episodes on the world reported (`reported`), else ().

    Example:
        >>> stitch_order("keyroom/compound")
        ('key', 'door', 'chest')
        >>> stitch_order("twx/twc", [("score_1", "score_2"), ("score_1", "score_2", "score_3")])
        ('score_1', 'score_2', 'score_3')
    """
    if declares_order(task):
        return subgoal_order(task) if stitchable(task) else ()
    return max(reported, key=len, default=())


def subtask_for(task: str, skill: str) -> str | None:
    """The task whose whole goal is sub-goal `skill` of `task`, with `task`'s knobs; None if none.

    Example:
        >>> subtask_for("keyroom/compound?n_rooms=3", "key")
        'keyroom/key?n_rooms=3'
    """
    base, _ = parse_task_name(task)
    _, _, query = task.partition("?")
    try:
        declared = get_task(base).subtasks
    except ValueError:
        return None
    name = declared.get(skill) or f"{family_of(base)}/{skill}"
    try:
        get_task(name)
    except ValueError:
        return None
    if name == base:
        return None
    return f"{name}?{query}" if query else name


def world_key(task: str, seed: int) -> tuple[str, str, int]:
    """What identifies the world a task plays on `seed`: two episodes with the same key played the
    same world (the family stands for the task in `SHARED_WORLDS` families, whose variants share one)."""
    base, knobs = parse_task_name(task)
    where = family_of(base) if family_of(base) in SHARED_WORLDS else base
    return where, "&".join(f"{k}={knobs[k]}" for k in sorted(knobs)), seed
