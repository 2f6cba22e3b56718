"""Situations: which observations show the same state of the world.

A deterministic game repeats an action's outcome when the action is taken again in the same state.
The agent's loop rules (`Session.tried_here`, the posterior's repeat avoidance, the loop breaker)
and the `repeated` flag of stored steps compare situations to find such repeats. By default a
situation is the whole observation; a task whose observations carry what the last action did
(keyroom's "You drop the black vase.") declares `TaskSpec.situation` to drop it, so "take vase"
then "drop vase" is seen to return where it started instead of looking like a new place.
TextWorldExpress follows each reply with the room as it now is, so its situation is that last
paragraph (`last_paragraph`): the kitchen after "inventory" is the kitchen after "move south".

A task whose points are each paid once, and lost again by undoing what earned them, declares
`TaskSpec.repeat_undoes_reward`: the loop rules then also pass over an action whose reward the
episode still holds (TextWorldExpress's twc: taking back an item already put away).

A task whose observations show what an action would do declares `TaskSpec.no_ops`: the listed
actions the observation shows would change nothing (TextWorldExpress's "open door to west" where it
describes the door to the West as open) count as known no-ops from the first sight.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Situation = Callable[[str], str]


def whole(observation: str) -> str:
    """The default situation: the observation itself."""
    return observation


def last_paragraph(observation: str) -> str:
    """The observation's last paragraph: the place as it now is, where a task follows the reply to
    an action with it (TextWorldExpress's room description after "You open the door.")."""
    return observation.rsplit("\n\n", 1)[-1].strip()


def situation_of(task: str) -> Situation:
    """The task's `observation -> situation` function; `whole` when it declares none or is not
    registered here (a bank read without its task plugin)."""
    from crl.tasks.registry import find_task

    spec = find_task(task)
    return (spec.situation if spec else None) or whole


def declared_idle_actions(task: str) -> frozenset[str]:
    """The actions the task declares never change anything (`TaskSpec.idle_actions`); empty when it
    declares none or is not registered here."""
    from crl.tasks.registry import find_task

    spec = find_task(task)
    return frozenset(spec.idle_actions) if spec else frozenset()


def repeat_undoes_reward(task: str) -> bool:
    """Whether the task declares that repeating an action whose reward is still held undoes it;
    False when it does not or is not registered here."""
    from crl.tasks.registry import find_task

    spec = find_task(task)
    return spec.repeat_undoes_reward if spec else False


def declared_no_ops(task: str) -> Callable[[str, Sequence[str]], set[str]] | None:
    """The task's `(observation, listed actions) -> those that would change nothing` (`TaskSpec.no_ops`);
    None when it declares none or is not registered here."""
    from crl.tasks.registry import find_task

    spec = find_task(task)
    return spec.no_ops if spec else None
