"""Places: where the player is, and where a listed action leads, as the observation names them.

A task whose observations name the room the player is in and the rooms its exits lead to
declares `TaskSpec.places`; the agent loop then knows which listed moves lead back to a place the
episode has already been since its last reward, and the loop rules pass over them while another
choice remains (`agent.frontier`). A reward starts the count again: what the task needs next may
be in a room already seen (TextWorldExpress's twc: bring a shirt back to the laundry room).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from crl.tasks.situations import last_paragraph


@dataclass(frozen=True)
class Places:
    """`here(observation)`: the place the observation shows the player in, or None;
    `leads_to(observation, action)`: the place the observation says the action leads to, or None
    (a move through a closed door, an action that goes nowhere)."""

    here: Callable[[str], str | None]
    leads_to: Callable[[str, str], str | None]


def places_of(task: str) -> Places | None:
    """The task's `Places`; None when it declares none or is not registered here."""
    from crl.tasks.registry import find_task

    spec = find_task(task)
    return spec.places if spec else None


_ROOM = re.compile(r"^You are in the ([^.]+)\.")


def room_of(observation: str) -> str | None:
    """The room the observation's description puts the player in, where it opens "You are in the
    kitchen." (TextWorldExpress, keyroom) -> kitchen; None otherwise."""
    found = _ROOM.match(last_paragraph(observation))
    return found.group(1) if found else None
