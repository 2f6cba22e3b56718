"""The key-door-treasure world of the seed's section 5: seeded generation, rules and text.

A world is a small tree of rooms laid out on a grid (so `north` of one room is `south` of
the next). The last room placed is the treasure room: a leaf behind a locked door, holding a
chest with the treasure. A key lies in one of the other rooms; distractor objects can be
taken and examined but do nothing. Everything here is pure: `World` and `State` are frozen
records, `admissible_actions` lists what is accepted in a state and `apply_action` returns
the next state with the game's feedback, which is what the environment and the solver share.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from crl.tasks.situations import last_paragraph

DIRECTIONS = ("north", "south", "east", "west")
OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}
_OFFSET = {"north": (0, 1), "south": (0, -1), "east": (1, 0), "west": (-1, 0)}

ROOM_NAMES = (
    "kitchen", "library", "cellar", "hall", "pantry", "study", "attic",
    "gallery", "workshop", "bedroom", "parlour", "armoury",
)  # fmt: skip
KEY_MATERIALS = ("brass", "iron", "silver", "copper", "bronze", "steel")
DOOR_WOODS = ("oak", "pine", "walnut", "cedar", "ebony", "birch")
CHEST_KINDS = ("wooden", "carved", "dusty", "painted", "battered", "heavy")
COLOURS = ("red", "blue", "green", "yellow", "black", "white", "grey", "purple", "orange")
DISTRACTORS = {
    "lamp": "It has no oil and will not light.",
    "book": "Its pages are blank.",
    "rug": "It is worn thin and hides nothing.",
    "vase": "It is empty.",
    "candle": "It is burnt down to a stub.",
    "cushion": "It is soft and of no use.",
    "bottle": "It is empty and dry.",
    "clock": "It stopped long ago.",
}

MIN_ROOMS, MAX_ROOMS = 2, 8
DEFAULT_ROOM_RANGE = (2, 4)

# Where an item is: a room index, or one of these.
INVENTORY = -1
IN_CHEST = -2
KEY, TREASURE = 0, 1  # indices into World.items; distractors follow

LOCKED, CLOSED, OPEN = "locked", "closed", "open"


@dataclass(frozen=True)
class Item:
    """A portable object: its name as used in actions and what `examine` says about it."""

    name: str
    description: str


@dataclass(frozen=True)
class World:
    """The fixed part of a game, generated from a seed.

    Attributes:
        seed: the seed it was generated from.
        rooms: room names, indexed by room number.
        exits: per room, sorted `(direction, room)` pairs.
        treasure_room: the room behind the door, holding the chest.
        door_room: the room in front of the door.
        door_dir: the direction from `door_room` through the door.
        door_name: e.g. "oak door" (actions just say "door").
        chest_name: e.g. "wooden chest" (actions just say "chest").
        items: the key, the treasure, then the distractors.
        key_room: where the key lies at the start.
        start_room: where the player starts.
        start_where: each item's starting location.
    """

    seed: int
    rooms: tuple[str, ...]
    exits: tuple[tuple[tuple[str, int], ...], ...]
    treasure_room: int
    door_room: int
    door_dir: str
    door_name: str
    chest_name: str
    items: tuple[Item, ...]
    key_room: int
    start_room: int
    start_where: tuple[int, ...]

    @property
    def key_name(self) -> str:
        return self.items[KEY].name

    def item_index(self, name: str) -> int:
        return next(i for i, item in enumerate(self.items) if item.name == name)

    def is_door_edge(self, room: int, direction: str) -> bool:
        return (room, direction) in (
            (self.door_room, self.door_dir),
            (self.treasure_room, OPPOSITE[self.door_dir]),
        )


@dataclass(frozen=True)
class State:
    """The changing part of a game; hashable, so the solver can search over it.

    `key_taken` and `treasure_taken` are sticky: they record that the sub-goal was reached,
    even if the item is dropped later.
    """

    room: int
    where: tuple[int, ...]
    door: str = LOCKED
    chest_open: bool = False
    key_taken: bool = False
    treasure_taken: bool = False

    def holds(self, item: int) -> bool:
        return self.where[item] == INVENTORY


def generate_world(seed: int, n_rooms: int | None = None, n_distractors: int = 2) -> World:
    """Build the world for `seed` with `random.Random(seed)` only.

    Args:
        seed: any integer; the same seed and knobs always give the same world.
        n_rooms: rooms including the treasure room; None draws 2-4 from the seed.
        n_distractors: useless portable objects scattered over the rooms.
    """
    rng = random.Random(seed)
    drawn_rooms = rng.randint(*DEFAULT_ROOM_RANGE)
    n = drawn_rooms if n_rooms is None else n_rooms
    if not MIN_ROOMS <= n <= MAX_ROOMS:
        raise ValueError(f"n_rooms={n} is out of range: choose {MIN_ROOMS}-{MAX_ROOMS}")
    if not 0 <= n_distractors <= len(DISTRACTORS):
        raise ValueError(f"n_distractors={n_distractors} is out of range: choose 0-{len(DISTRACTORS)}")

    cells = {(0, 0): 0}
    position = [(0, 0)]
    exits: list[dict[str, int]] = [{}]
    for new in range(1, n):
        frontier = [(room, d) for room in range(new) for d in DIRECTIONS if _neighbour(position[room], d) not in cells]
        room, d = rng.choice(frontier)
        cell = _neighbour(position[room], d)
        cells[cell] = new
        position.append(cell)
        exits.append({OPPOSITE[d]: room})
        exits[room][d] = new
    treasure_room, door_room, door_dir = n - 1, room, d  # the last room placed is a leaf

    rooms = tuple(rng.sample(ROOM_NAMES, n))
    key_material = rng.choice(KEY_MATERIALS)
    door_name = f"{rng.choice(DOOR_WOODS)} door"
    chest_name = f"{rng.choice(CHEST_KINDS)} chest"
    outer = list(range(n - 1))
    key_room = rng.choice(outer)
    start_room = rng.choice([r for r in outer if r != key_room] or outer)

    items = [
        Item(f"{key_material} key", f"A small {key_material} key. It looks like it fits the {door_name}."),
        Item("treasure", "A heap of gold coins and jewels: the treasure you came for."),
    ]
    where = [key_room, IN_CHEST]
    for noun in rng.sample(sorted(DISTRACTORS), n_distractors):
        colour = rng.choice(COLOURS)
        items.append(Item(f"{colour} {noun}", f"An ordinary {colour} {noun}. {DISTRACTORS[noun]}"))
        where.append(rng.randrange(n))

    return World(
        seed=seed,
        rooms=rooms,
        exits=tuple(tuple(sorted(e.items())) for e in exits),
        treasure_room=treasure_room,
        door_room=door_room,
        door_dir=door_dir,
        door_name=door_name,
        chest_name=chest_name,
        items=tuple(items),
        key_room=key_room,
        start_room=start_room,
        start_where=tuple(where),
    )


def _neighbour(cell: tuple[int, int], direction: str) -> tuple[int, int]:
    dx, dy = _OFFSET[direction]
    return cell[0] + dx, cell[1] + dy


def _visible_items(world: World, state: State) -> list[int]:
    """Items the player can see and reach in the current room (not carried)."""
    in_open_chest = state.room == world.treasure_room and state.chest_open
    return [i for i, at in enumerate(state.where) if at == state.room or (at == IN_CHEST and in_open_chest)]


def _carried(state: State) -> list[int]:
    return [i for i, at in enumerate(state.where) if at == INVENTORY]


def _at_door(world: World, state: State) -> bool:
    return state.room in (world.door_room, world.treasure_room)


def admissible_actions(world: World, state: State) -> list[str]:
    """Every action the game accepts in `state`, sorted."""
    actions = {"look", "inventory"}
    for direction, _ in world.exits[state.room]:
        if state.door == OPEN or not world.is_door_edge(state.room, direction):
            actions.add(f"go {direction}")
    for i in _visible_items(world, state):
        actions.update((f"take {world.items[i].name}", f"examine {world.items[i].name}"))
    for i in _carried(state):
        actions.update((f"drop {world.items[i].name}", f"examine {world.items[i].name}"))
    if _at_door(world, state):
        actions.add("examine door")
        if state.door == LOCKED and state.holds(KEY):
            actions.add(f"unlock door with {world.key_name}")
        if state.door == CLOSED:
            actions.add("open door")
    if state.room == world.treasure_room:
        actions.add("examine chest")
        if not state.chest_open:
            actions.add("open chest")
    return sorted(actions)


def apply_action(world: World, state: State, action: str) -> tuple[State, str]:
    """The state after an admissible `action`, and the game's feedback.

    Raises:
        ValueError: `action` is not in `admissible_actions(world, state)`.
    """
    if action not in admissible_actions(world, state):
        raise ValueError(f"{action!r} is not admissible here; pick one of admissible_actions()")
    verb, _, target = action.partition(" ")
    if verb == "go":
        room = dict(world.exits[state.room])[target]
        return replace(state, room=room), f"You go {target} to the {world.rooms[room]}."
    if verb == "take":
        i = world.item_index(target)
        from_chest = state.where[i] == IN_CHEST
        new = replace(
            state,
            where=_moved(state.where, i, INVENTORY),
            key_taken=state.key_taken or i == KEY,
            treasure_taken=state.treasure_taken or i == TREASURE,
        )
        source = f" from the {world.chest_name}" if from_chest else ""
        return new, f"You take the {target}{source}."
    if verb == "drop":
        i = world.item_index(target)
        return replace(state, where=_moved(state.where, i, state.room)), f"You drop the {target}."
    if verb == "unlock":
        return replace(state, door=CLOSED), f"You unlock the {world.door_name} with the {world.key_name}."
    if verb == "open" and target == "door":
        beyond = world.rooms[world.treasure_room]
        return replace(state, door=OPEN), f"You open the {world.door_name}. Beyond it lies the {beyond}."
    if verb == "open":
        inside = "the treasure" if state.where[TREASURE] == IN_CHEST else "nothing"
        return replace(state, chest_open=True), f"You open the {world.chest_name}. Inside you see {inside}."
    if verb == "examine":
        return state, _examine(world, state, target)
    if verb == "inventory":
        return state, _inventory_line(world, state)
    return state, "You look around."


def _moved(where: tuple[int, ...], item: int, to: int) -> tuple[int, ...]:
    return where[:item] + (to,) + where[item + 1 :]


def _examine(world: World, state: State, target: str) -> str:
    if target == "door":
        return f"A sturdy {world.door_name}. It is {state.door}."
    if target == "chest":
        if not state.chest_open:
            return f"A {world.chest_name}. It is closed."
        inside = "the treasure" if state.where[TREASURE] == IN_CHEST else "nothing"
        return f"A {world.chest_name}. It is open and holds {inside}."
    return world.items[world.item_index(target)].description


def _with_article(name: str) -> str:
    if name == "treasure":
        return "the treasure"
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _listing(names: list[str]) -> str:
    if len(names) <= 1:
        return "".join(names)
    return f"{', '.join(names[:-1])} and {names[-1]}"


def _inventory_line(world: World, state: State) -> str:
    carried = [_with_article(world.items[i].name) for i in _carried(state)]
    return f"You are carrying {_listing(carried) or 'nothing'}."


def describe(world: World, state: State) -> str:
    """The room as the player sees it: objects, exits and what the player carries."""
    room = state.room
    lines = [f"You are in the {world.rooms[room]}."]
    on_floor = [world.items[i].name for i, at in enumerate(state.where) if at == room]
    if on_floor:
        lines.append(f"You see {_listing([_with_article(n) for n in on_floor])}.")
    if room == world.treasure_room:
        if not state.chest_open:
            lines.append(f"A {world.chest_name} stands here. It is closed.")
        else:
            inside = "the treasure" if state.where[TREASURE] == IN_CHEST else "nothing"
            lines.append(f"A {world.chest_name} stands here. It is open and holds {inside}.")
    lines.append(f"Exits: {'; '.join(_exit_phrase(world, state, d, to) for d, to in world.exits[room])}.")
    lines.append(_inventory_line(world, state))
    return "\n".join(lines)


def _exit_phrase(world: World, state: State, direction: str, to: int) -> str:
    if not world.is_door_edge(state.room, direction):
        return f"{direction} to the {world.rooms[to]}"
    if state.door == OPEN:
        return f"{direction} through the open {world.door_name} to the {world.rooms[to]}"
    return f"{direction} through a {state.door} {world.door_name}"


OPEN_DOOR_ROLE = "go through the open door"
LEAVE_CHEST_ROLE = "go back through the open door, away from the chest"
_KEY_VERBS = ("take", "drop", "examine")


def action_role(observation: str, action: str) -> str | None:
    r"""What `action` does relative to the room described in `observation`, in words that hold in
    every world: "go through the open door" for the move through the open door (its compass word
    differs from world to world) toward the chest, and another role for the same move back out of
    the chest's room (the room behind the door: a success going in is no vote for coming back out),
    "take the key" (and drop, examine, "unlock door with the key")
    for the key whatever its metal; None for every other action: distractors are the world's own,
    and for a plain exit nothing the description says tells one from another.

    Reads the last "Exits:" line `describe` wrote, so it works on stored observations too.

    Example:
        >>> room = "You are in the hall.\nExits: east through the open oak door to the attic; west to the cellar."
        >>> action_role(room, "go east"), action_role(room, "go west"), action_role(room, "take iron key")
        ('go through the open door', None, 'take the key')
    """
    words = action.lower().split()
    if len(words) >= 2 and words[-1] == "key":
        if words[0] in _KEY_VERBS:
            return f"{words[0]} the key"
        if words[:3] == ["unlock", "door", "with"]:
            return "unlock door with the key"
    exit_phrase = _listed_exit(observation, action)
    if exit_phrase is None or not exit_phrase.startswith(f"{words[1]} through the open "):
        return None
    in_chest_room = any(" chest stands here." in line for line in observation.splitlines())
    return LEAVE_CHEST_ROLE if in_chest_room else OPEN_DOOR_ROLE


def _listed_exit(observation: str, action: str) -> str | None:
    """The phrase of the last "Exits:" line `describe` wrote for the direction of a move `action`
    ("east through the open oak door to the attic"); None for any other action or no such exit."""
    words = action.lower().split()
    if len(words) != 2 or words[0] != "go" or words[1] not in DIRECTIONS:
        return None
    exits = next((line for line in reversed(observation.splitlines()) if line.startswith("Exits: ")), None)
    if exits is None:
        return None
    return next(
        (p for p in exits.removeprefix("Exits: ").rstrip(".").split("; ") if p.startswith(f"{words[1]} ")), None
    )


def situation(observation: str) -> str:
    r"""The room as `describe` wrote it, without the line saying what the last action did: the
    state every next action's outcome depends on, so "take black vase" then "drop black vase" is
    back where it started.

    Example:
        >>> situation("You drop the black vase.\n\nYou are in the cellar.\nYou are carrying nothing.")
        'You are in the cellar.\nYou are carrying nothing.'
    """
    return last_paragraph(observation)


def room_through(observation: str, action: str) -> str | None:
    r"""The room a listed move leads to, as the last "Exits:" line names it: a plain exit or one
    through the open door; None for any other action and behind a door that is not open.

    Example:
        >>> text = "You are in the hall.\nExits: north to the cellar; east through a locked iron door."
        >>> room_through(text, "go north"), room_through(text, "go east"), room_through(text, "look")
        ('cellar', None, None)
    """
    exit_phrase = _listed_exit(observation, action)
    return exit_phrase.rsplit(" to the ", 1)[1] if exit_phrase and " to the " in exit_phrase else None
