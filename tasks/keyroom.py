"""The `keyroom/*` tasks: the key-door-treasure world as a `TextEnv`, its variants and solver.

Variants share one world per seed and differ in where the game starts and what wins:
`key` (take the key), `door` (key in hand: unlock and open the door), `chest` (door open:
take the treasure from the chest) and `compound` (all three in order), mirroring the
sub-skills and the compound task of the seed's section 5.

Example:
    >>> env = KeyroomEnv("compound", n_rooms=3)
    >>> obs = env.reset(7)
    >>> for action in solve(env, None):
    ...     obs, reward, done, info = env.step(action)
    >>> reward, done, info["subgoals"]
    (1.0, True, {'key': True, 'door': True, 'chest': True})
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from crl.tasks.base import Observation, StepOutcome, TaskSpec
from crl.tasks.game_identity import digest
from crl.tasks.keyroom_world import (
    DIRECTIONS,
    INVENTORY,
    KEY,
    OPEN,
    State,
    World,
    action_role,
    admissible_actions,
    apply_action,
    describe,
    generate_world,
    room_through,
    situation,
)
from crl.tasks.places import Places, room_of

FAMILY = "keyroom"


@dataclass(frozen=True)
class Variant:
    """One keyroom task: its name, a one-line description and its step limit."""

    name: str
    description: str
    max_steps: int


VARIANTS = {
    v.name: v
    for v in (
        Variant("key", "Find the key somewhere in the house and take it.", 10),
        Variant("door", "Holding the key, unlock and open the locked door to the treasure room.", 10),
        Variant("chest", "The door is open: open the chest in the treasure room and take the treasure.", 10),
        Variant("compound", "Take the key, unlock and open the door, then take the treasure from the chest.", 25),
    )
}


def initial_state(world: World, variant: str) -> State:
    """Where a `variant` game starts: `door` and `chest` begin with the key in hand."""
    state = State(room=world.start_room, where=world.start_where)
    if variant in ("door", "chest"):
        where = (INVENTORY,) + state.where[KEY + 1 :]
        state = replace(state, where=where, key_taken=True)
    if variant == "chest":
        state = replace(state, door=OPEN)
    return state


def goal_text(world: World, variant: str) -> str:
    """The goal shown to the agent for `variant` in `world`."""
    key, door = world.key_name, world.door_name
    chest, room = world.chest_name, world.rooms[world.treasure_room]
    return {
        "key": f"Find the {key} and take it.",
        "door": f"Unlock the {door} with the {key} you carry, then open it.",
        "chest": f"Open the {chest} in the {room} and take the treasure.",
        "compound": (
            f"Take the {key}, unlock and open the {door}, then take the treasure from the {chest} in the {room}."
        ),
    }[variant]


def subgoals(state: State) -> dict[str, bool]:
    """Which sub-goals have been reached so far: `key` taken, `door` open, `chest` emptied."""
    return {"key": state.key_taken, "door": state.door == OPEN, "chest": state.treasure_taken}


def goal_reached(state: State, variant: str) -> bool:
    """Whether `state` completes `variant`'s goal."""
    reached = subgoals(state)
    return reached["key" if variant == "key" else "door" if variant == "door" else "chest"]


def canonical_action(text: str, admissible: list[str]) -> str | None:
    """The admissible action that `text` names, or None.

    Case, spacing, a final full stop and articles are ignored; a bare direction means
    `go` there; an object may be named by its last word when that is unambiguous, and
    `unlock door` means unlocking it with the key in hand.

    Example:
        >>> canonical_action("Take the KEY.", ["look", "take brass key"])
        'take brass key'
    """
    words = [w for w in text.lower().strip().rstrip(".!").split() if w not in ("the", "a", "an")]
    action = " ".join(words)
    if action in DIRECTIONS:
        action = f"go {action}"
    if action in admissible:
        return action
    verb, _, target = action.partition(" ")
    if not target:
        return None
    matches = [a for a in admissible if a.startswith(verb + " ") and _names(a[len(verb) + 1 :], target)]
    return matches[0] if len(matches) == 1 else None


def _names(full: str, short: str) -> bool:
    return full.endswith(" " + short) or full.startswith(short + " with ")


class KeyroomEnv:
    """A `keyroom/<variant>` game; `reset(seed)` builds the seed's world.

    Args:
        variant: "key", "door", "chest" or "compound" (a "keyroom/" prefix is accepted).
        n_rooms: rooms including the treasure room, 2-8; None lets the seed pick 2-4.
        n_distractors: useless portable objects, 0-8.

    Knobs may be given as strings (as parsed from `keyroom/compound?n_rooms=4`).
    After `reset`, `world` and `state` hold the game (frozen, picklable records).
    """

    def __init__(
        self,
        variant: str = "compound",
        *,
        n_rooms: int | str | None = None,
        n_distractors: int | str = 2,
    ):
        self.variant = _variant_name(variant)
        self.name = f"{FAMILY}/{self.variant}"
        self.n_rooms = None if n_rooms in (None, "") else _as_int("n_rooms", n_rooms)
        self.n_distractors = _as_int("n_distractors", n_distractors)
        generate_world(0, self.n_rooms, self.n_distractors)  # fail now on bad knobs, not at reset
        self.world: World | None = None
        self.state: State | None = None
        self.done = False

    def reset(self, seed: int) -> Observation:
        """Start the game for `seed` and return the first observation."""
        self.world = generate_world(seed, self.n_rooms, self.n_distractors)
        self.state = initial_state(self.world, self.variant)
        self.done = False
        return self._observe("")

    def step(self, action: str) -> StepOutcome:
        """Play `action`; one that is not admissible changes nothing and sets `info["invalid"]`."""
        if self.world is None or self.state is None:
            raise RuntimeError("call reset(seed) before step()")
        if self.done:
            raise RuntimeError("the episode is over; call reset(seed) to start a new one")
        chosen = canonical_action(action, admissible_actions(self.world, self.state))
        if chosen is None:
            feedback = f"Nothing happens: '{' '.join(action.split())}' is not a valid action here."
            info = self._info(invalid=True, action=None)
            return StepOutcome(self._observe(feedback), 0.0, False, info)
        self.state, feedback = apply_action(self.world, self.state, chosen)
        self.done = goal_reached(self.state, self.variant)
        if self.done:
            feedback += " You have completed the task!"
        info = self._info(invalid=False, action=chosen)
        return StepOutcome(self._observe(feedback), 1.0 if self.done else 0.0, self.done, info)

    def game_id(self) -> str:
        """The game the last `reset` started: the variant and the whole world (rooms, doors, objects;
        not the seed it came from)."""
        if self.world is None:
            raise RuntimeError("call reset(seed) before game_id()")
        return digest(self.name, repr(replace(self.world, seed=0)))

    def close(self) -> None:
        """Nothing to release."""

    def _observe(self, feedback: str) -> Observation:
        room = describe(self.world, self.state)
        return Observation(
            text=f"{feedback}\n\n{room}" if feedback else room,
            goal=goal_text(self.world, self.variant),
            admissible_actions=admissible_actions(self.world, self.state),
        )

    def _info(self, invalid: bool, action: str | None) -> dict[str, Any]:
        return {
            "success": self.done,
            "won": self.done,
            "subgoals": subgoals(self.state),
            "invalid": invalid,
            "action": action,
        }


def _variant_name(variant: str) -> str:
    name = variant.removeprefix(f"{FAMILY}/")
    if name not in VARIANTS:
        raise ValueError(f"unknown keyroom variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    return name


def _as_int(knob: str, value: int | str) -> int:
    try:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{knob} must be an integer, got {value!r}") from None


def shortest_plan(world: World, start: State, variant: str) -> list[str]:
    """A shortest action sequence from `start` that completes `variant` (breadth-first search).

    Only progress actions are searched (moves, opening, unlocking, taking the key or the
    treasure): distractors and dropping never enable anything, so this is still shortest.
    """
    if goal_reached(start, variant):
        return []
    progress = {f"take {world.key_name}", "take treasure"}
    parents: dict[State, tuple[State, str] | None] = {start: None}
    frontier = deque([start])
    while frontier:
        state = frontier.popleft()
        for action in admissible_actions(world, state):
            if action.split(" ", 1)[0] not in ("go", "open", "unlock") and action not in progress:
                continue
            nxt, _ = apply_action(world, state, action)
            if nxt in parents:
                continue
            parents[nxt] = (state, action)
            if goal_reached(nxt, variant):
                return _path(parents, nxt)
            frontier.append(nxt)
    raise RuntimeError(f"keyroom world {world.seed} has no solution for {variant!r}: a generation bug")


def _path(parents: dict[State, tuple[State, str] | None], end: State) -> list[str]:
    actions = []
    while (link := parents[end]) is not None:
        end, action = link
        actions.append(action)
    return actions[::-1]


def solve(env_or_seed: KeyroomEnv | int, variant: str | None = None, **knobs: Any) -> list[str]:
    """The shortest winning actions for a reset env (from its current state) or for a seed.

    Args:
        env_or_seed: a `KeyroomEnv` after `reset`, or a seed.
        variant: required with a seed; with an env, None or the env's own variant.
        **knobs: `n_rooms`, `n_distractors` when a seed is given.
    """
    if isinstance(env_or_seed, KeyroomEnv):
        env = env_or_seed
        if env.world is None or env.state is None:
            raise RuntimeError("call env.reset(seed) before solve(env)")
        if variant is not None and _variant_name(variant) != env.variant:
            raise ValueError(f"env plays {env.variant!r}, not {variant!r}; pass variant=None")
        return shortest_plan(env.world, env.state, env.variant)
    if variant is None:
        raise ValueError("solve(seed, variant) needs a variant: key, door, chest or compound")
    env = KeyroomEnv(variant, **knobs)
    env.reset(env_or_seed)
    return shortest_plan(env.world, env.state, env.variant)


SUBGOAL_ORDER = ("key", "door", "chest")

SPECS: tuple[TaskSpec, ...] = tuple(
    TaskSpec(
        name=f"{FAMILY}/{_variant.name}",
        factory=partial(KeyroomEnv, _variant.name),
        description=_variant.description,
        max_steps=_variant.max_steps,
        subgoal_order=SUBGOAL_ORDER,
        subtasks={skill: f"{FAMILY}/{skill}" for skill in SUBGOAL_ORDER if skill != _variant.name},
        action_role=action_role,
        situation=situation,
        places=Places(here=room_of, leads_to=room_through),
    )
    for _variant in VARIANTS.values()
)
