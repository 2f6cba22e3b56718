"""Toggles: the things an action sets to a state, so the loop rules know a change still in effect and
the undoing of one.

A task declares `TaskSpec.toggles`, `(observation, action) -> (thing, state)` or None: the thing the
action sets and the state it sets it to, named alike from wherever the action is taken. In
TextWorldExpress, "open door to north" in the corridor and "close door to south" in the bedroom act
on the same thing, "the door between the bedroom and the corridor". With `agent.undos` the agent
then passes over setting a thing to the state the episode already set it to (a no-op), and over
setting back a thing it changed since its last reward (an undo: it only returns to where the
episode was), while another choice remains. A thing changed twice is taken to be back where it was.
A task that never pays for an undo declares `TaskSpec.undo_never_rewarded` (TextWorldExpress), and the
undo stays passed over after a reward too: twc's player who opened the fridge, took the milk and
earned its point gains nothing by closing the fridge again.

A task whose actions simply come in pairs that undo each other declares them with
`pair_toggles(inverse)` (a `UserTask`'s `inverse_action`): the thing is the pair of actions, in
the place the observation shows where the task names its places.
"""

from __future__ import annotations

from collections.abc import Callable

from crl.tasks.places import Places

Toggles = Callable[[str, str], tuple[str, str] | None]


def pair_toggles(inverse: Callable[[str], str | None], places: Places | None = None) -> Toggles:
    """Toggles from pairs of actions that undo each other (`inverse(action)`, or None for an action
    that is not one of a pair): the thing is the pair, in the observation's place when `places` names
    one; the state is the action itself.

    Example:
        >>> toggles = pair_toggles({"open box": "close box", "close box": "open box"}.get)
        >>> toggles("You see a box.", "close box"), toggles("You see a box.", "look")
        (('close box | open box', 'close box'), None)
    """

    def toggles(observation: str, action: str) -> tuple[str, str] | None:
        undo = inverse(action)
        if undo is None:
            return None
        thing = " | ".join(sorted((action, undo)))
        place = places.here(observation) if places is not None else None
        return (f"{thing} in {place}" if place else thing), action

    return toggles


def declared_toggles(task: str) -> Toggles | None:
    """The task's `(observation, action) -> (thing, state)` (`TaskSpec.toggles`); None when it declares
    none or is not registered here."""
    from crl.tasks.registry import find_task

    spec = find_task(task)
    return spec.toggles if spec else None


def undo_never_rewarded(task: str) -> bool:
    """Whether the task declares that setting a thing back never earns a reward
    (`TaskSpec.undo_never_rewarded`); False when it does not or is not registered here."""
    from crl.tasks.registry import find_task

    spec = find_task(task)
    return spec.undo_never_rewarded if spec else False
