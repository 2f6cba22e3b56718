"""Action roles: matching a stored action to an admissible one by what it does, not how it is spelled.

Episodic control reads the value of an admissible action from stored steps that took "the same"
action in a similar state. Across worlds whose layouts differ, the same text can mean different
things: "go east" was the move through the open door in the world it was stored from, and is a
plain exit here, while the move through the open door here is "go north". A task that declares
`TaskSpec.action_role` names what an action does relative to what the player sees ("go through the
open door"); with roles, a stored step whose action had a role votes for the admissible actions
with that role (and for no other), and a stored step without one votes by text as before, for the
admissible actions that have no role.

The role of a stored step is computed from its own stored observation, so banks written before a
task declared roles gain them without re-ingesting. `RetrievalConfig.ec_action_roles` switches this
off.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

RoleOf = Callable[[str, str], "str | None"]


@dataclass(frozen=True)
class ActionRoles:
    """The roles of actions in one current state, and of stored steps.

    Attributes:
        role_of: the task's `(observation, action) -> role or None`.
        observation: the current observation text.
    """

    role_of: RoleOf
    observation: str

    def current(self, action: str) -> str | None:
        """The role of an admissible action here."""
        return self.role_of(self.observation, action)

    def stored(self, observation: str, action: str) -> str | None:
        """The role a stored step's action had where it was taken."""
        return self.role_of(observation, action)


def roles_for(task: str, observation: str) -> ActionRoles | None:
    """The task's action roles in the state `observation` describes; None when the task declares none
    (or is not registered here, e.g. a bank read without its task plugin)."""
    from crl.tasks.registry import get_task

    try:
        role_of = get_task(task).action_role
    except ValueError:
        return None
    return ActionRoles(role_of, observation) if role_of is not None else None
