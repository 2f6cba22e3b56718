"""What the synthesizer needs to know about a task's skills: their order and their sub-tasks.

A task declares both on its `TaskSpec` (`subgoal_order`: the sub-goals of its compound goal
in the order they must be reached; `subtasks`: sub-goal name -> the task that has it as its
whole goal). Without `subtasks`, the sub-task of skill `s` in family `f` is the task `f/s` when
it exists.
"""

from __future__ import annotations

from crl.tasks.registry import get_task, parse_task_name

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
