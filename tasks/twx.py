"""The `twx/<game>` tasks: TextWorldExpress games behind the `TextEnv` interface.

Game parameters are query knobs with TextWorldExpress's own names, for example
`twx/coin?numLocations=3&numDistractorItems=0&includeDoors=0`. Seeds follow the engine's own
folds: train 0-999, dev 10000-10999, test 20000-20999 (the fold also picks the engine's
object set, so the same number in another fold is a different game).

Admissible actions, score, success (`tasksuccess`) and failure (`taskfailure`) come from the
engine. An action that does not name an admissible one is not sent: it sets `info["invalid"]`
and changes nothing (the engine would answer "Unknown action" and change nothing either).
An engine reply that does not describe the room (an inventory listing, "You open the door",
a refusal) is followed by the room's description ("look around"), so every observation says
where the agent is: without it, every world's "Your inventory is currently empty" is one
state to memory. `roomContext=0` turns this off (the engine's replies alone). The room
description, an observation's last paragraph, is the game's situation (`crl.tasks.situations`);
it names the room and the rooms its open exits lead to (`crl.tasks.places`).
Each point of the engine's raw score is a sub-goal: `info["subgoals"]` is
`{"score_1": ..., "score_N": ...}` over the game's maximum raw score N, an entry True once the
raw score has reached it (a later loss of points does not undo a sub-goal).

`max_steps` defaults are the 90th percentile of gold-path lengths over train seeds 0-49 with
the default parameters (gold paths explore; they are not shortest):

    game          min  median  p90  max
    coin            2    13     30   33
    twc            13    16     21   30
    cookingworld   15    42     67   98
    mapreader       7    11     13   13
    sorting         6     8     10   10
    arithmetic      5     5      5    5
    simonsays       5     5      5    5
    peckingorder    9     9      9    9

Easier settings are much shorter (p90): `coin?numLocations=3&numDistractorItems=0&includeDoors=0`
7, `twc?numLocations=1&numItemsToPutAway=1` 4, `cookingworld?numLocations=1&numIngredients=1&numDistractorItems=0`
12; pass a tighter step limit to the runner for them.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from crl.tasks.base import Observation, SeedFolds, StepOutcome, TaskSpec
from crl.tasks.game_identity import digest
from crl.tasks.java_engine import EngineError, JavaEngine, import_suite, invalid_feedback, match_action, shutdown_java
from crl.tasks.places import Places, room_of
from crl.tasks.situations import last_paragraph

FAMILY = "twx"
FOLDS = SeedFolds(train=range(0, 1000), dev=range(10_000, 11_000), test=range(20_000, 21_000))
STEP_LIMIT = 1_000_000  # the engine's own limit; the runner enforces the real one
OUR_KNOBS = ("roomContext",)


@dataclass(frozen=True)
class Game:
    """One TextWorldExpress game: its engine name, description, settable parameters, step limit, and
    whether repeating a rewarded action undoes it (`TaskSpec.repeat_undoes_reward`)."""

    name: str
    description: str
    params: tuple[str, ...]
    max_steps: int
    repeat_undoes_reward: bool = False


_ROOMS = ("numLocations", "includeDoors", "limitInventorySize")
GAMES = {
    g.name: g
    for g in (
        Game("coin", "Explore the house and take the coin.", (*_ROOMS, "numDistractorItems"), 30),
        Game(
            "twc",
            "Put objects away in their usual places (TextWorld Commonsense).",
            (*_ROOMS, "numItemsToPutAway"),
            21,
            repeat_undoes_reward=True,
        ),
        Game(
            "cookingworld",
            "Find the recipe and ingredients, prepare and eat the meal.",
            (*_ROOMS, "numIngredients", "numDistractorItems"),
            67,
        ),
        Game(
            "mapreader",
            "Read the map, fetch the coin and bring it to the box.",
            (*_ROOMS, "maxDistanceApart", "maxDistractorItemsPerLocation"),
            13,
        ),
        Game("sorting", "Put the objects in the box from smallest to largest quantity.", (), 10),
        Game("arithmetic", "Solve the math problem, then box the item with that quantity.", (), 5),
        Game(
            "simonsays",
            "Do exactly what Simon says.",
            ("gameLength", "numDistractors", "memorization", "verbose"),
            5,
        ),
        Game("peckingorder", "Read the instruction book and follow it until the game ends.", (), 9),
    )
}


def fold_of(seed: int) -> str:
    """The engine fold ("train", "dev" or "test") that `seed` belongs to, or a ValueError."""
    for fold in ("train", "dev", "test"):
        if seed in FOLDS.get(fold):
            return fold
    raise ValueError(
        f"seed {seed} is in none of TextWorldExpress's folds: "
        "train 0-999, dev 10000-10999, test 20000-20999 (see `crl tasks`)"
    )


class TwxEnv:
    """A `twx/<game>` game; `reset(seed)` generates the seed's game in the engine.

    Args:
        game: a TextWorldExpress game name (a "twx/" prefix is accepted).
        **params: the game's integer parameters, e.g. `numLocations=3` (see `GAMES`), and
            `roomContext` (1, the default: a reply that does not describe the room is followed
            by the room's description; 0: the engine's replies alone).

    The Java engine starts at the first `reset` and is reused for every later one.
    """

    def __init__(self, game: str = "coin", **params: int | str):
        import_suite("textworld_express", "textworld-express")
        self.game = _game(game)
        unknown = sorted(set(params) - set(self.game.params) - set(OUR_KNOBS))
        if unknown:
            known = ", ".join((*self.game.params, *OUR_KNOBS))
            raise ValueError(f"twx/{self.game.name} has no parameter {', '.join(unknown)}; its parameters: {known}")
        room_context = _as_int("roomContext", params.pop("roomContext", 1))
        if room_context not in (0, 1):
            raise ValueError(f"twx roomContext must be 0 or 1, got {room_context}")
        self.room_context = bool(room_context)
        self.params = {k: _as_int(k, v) for k, v in params.items()}
        self.name = f"{FAMILY}/{self.game.name}"
        self.engine = JavaEngine("TextWorldExpress", self._start_engine)
        self.seed: int | None = None
        self.done = True
        self._info: dict[str, Any] = {}
        self._gold: list[str] = []
        self._first_text = ""
        self._max_raw: int | None = None
        self._best_raw = 0.0

    def _start_engine(self):
        from textworld_express import TextWorldExpressEnv

        handle = TextWorldExpressEnv(envStepLimit=STEP_LIMIT)
        try:
            handle.load(self.game.name, ",".join(f"{k}={v}" for k, v in self.params.items()))
        except BaseException:  # a bad parameter value: do not leave the JVM running
            shutdown_java(handle)
            raise
        return handle

    def reset(self, seed: int) -> Observation:
        """Start the seed's game and return the first observation."""
        fold = fold_of(seed)
        with self.engine.guard(f"reset({seed})"):
            raw = self.engine.handle
            obs, info = raw.reset(seed=seed, gameFold=fold, generateGoldPath=True)
            self._gold = list(raw.getGoldActionSequence())
            self._max_raw = _max_raw_score(raw)
        self.seed, self.done, self._info, self._best_raw = seed, False, info, 0.0
        self._first_text = obs
        return self._observe(obs)

    def step(self, action: str) -> StepOutcome:
        """Play `action`; one that names no admissible action changes nothing and sets `info["invalid"]`."""
        if self.seed is None:
            raise RuntimeError("call reset(seed) before step()")
        if self.done:
            raise RuntimeError("the episode is over; call reset(seed) to start a new one")
        chosen = match_action(action, self._info["validActions"], move_verb="move")
        if chosen is None:
            return StepOutcome(self._observe(invalid_feedback(action)), 0.0, False, self._outcome(None))
        try:
            with self.engine.guard(f"step({chosen!r})"):
                obs, reward, _, info = self.engine.handle.step(chosen)
        except EngineError:
            self.done = True
            raise
        self._info = info
        self._best_raw = max(self._best_raw, float(info["scoreRaw"]))
        self.done = bool(info["tasksuccess"] or info["taskfailure"])
        return StepOutcome(self._observe(obs), float(reward), self.done, self._outcome(chosen))

    def gold_actions(self) -> list[str]:
        """The engine's winning action sequence for the current episode, from its start."""
        if self.seed is None:
            raise RuntimeError("call reset(seed) before gold_actions()")
        return list(self._gold)

    def game_id(self) -> str | None:
        """The game the last `reset` started, where the first observation shows all of it (one
        location: `numLocations=1`); None elsewhere, since different dungeons can share a first room
        and the engine draws its walkthrough at random on each reset (on coin with doors, 59 of 96
        dev seeds gave another walkthrough on a second reset), so neither tells games apart."""
        if self.seed is None:
            raise RuntimeError("call reset(seed) before game_id()")
        if self.params.get("numLocations") != 1:
            return None
        return digest(self.name, self.params, self._first_text)

    def close(self) -> None:
        """Shut the Java engine down; a later `reset` starts a new one."""
        self.engine.close()
        self.seed, self.done = None, True

    def _observe(self, text: str) -> Observation:
        return Observation(
            text=with_room(text, self._info.get("look", "")) if self.room_context else text.strip(),
            goal=self._info["taskDescription"].strip(),
            admissible_actions=sorted(self._info["validActions"]),
        )

    def _outcome(self, action: str | None) -> dict[str, Any]:
        info = self._info
        return {
            "success": bool(info["tasksuccess"]),
            "won": bool(info["tasksuccess"]),
            "lost": bool(info["taskfailure"]),
            "score": float(info["score"]),
            "score_raw": float(info["scoreRaw"]),
            "subgoals": self._subgoals(),
            "invalid": action is None,
            "action": action,
        }

    def _subgoals(self) -> dict[str, bool]:
        reached = int(self._best_raw)
        total = self._max_raw if self._max_raw is not None else reached
        return {f"score_{k}": k <= reached for k in range(1, max(total, reached) + 1)}


def with_room(reply: str, look: str) -> str:
    """The engine's reply, followed by the room's description unless the reply already gives it.

    Example:
        >>> with_room("Your inventory is empty.", "You are in the kitchen.")
        'Your inventory is empty.\\n\\nYou are in the kitchen.'
        >>> with_room("You are in the kitchen. ", "You are in the kitchen.")
        'You are in the kitchen.'
    """
    reply, look = reply.strip(), look.strip()
    if not look or look in reply:
        return reply
    return f"{reply}\n\n{look}"


LOOKING = ("look around", "inventory")
"""Actions that only describe (the room, what the player holds) and change nothing in any game."""

_MOVE = re.compile(r"^move (north|south|east|west)$")


def room_beyond(observation: str, action: str) -> str | None:
    """The room a move leads to, where the description names it ("To the West you see the living
    room.", "Through an open plain door, to the South you see the pantry."); None behind a closed door.

    Example:
        >>> room_beyond("You are in the hall. \\nTo the West you see the living room.", "move west")
        'living room'
    """
    move = _MOVE.match(action)
    if move is None:
        return None
    found = re.search(rf"[Tt]o the {move.group(1).capitalize()} you see the ([^.]+)\.", last_paragraph(observation))
    return found.group(1) if found else None


_DOOR_ACTION = re.compile(r"^(open door to|close door to|move) (north|south|east|west)$")
_CONTAINER_ACTION = re.compile(r"^(open|close) (.+)$")


def shown_no_ops(observation: str, actions: Sequence[str]) -> set[str]:
    """The listed actions the room's description shows would change nothing (`TaskSpec.no_ops`): opening
    a door or container it describes as open, closing one it describes as closed, walking through a
    closed door.

    Example:
        >>> room = ("You are in the hall. You see a fridge that is closed, and an open wardrobe, that is empty. "
        ...         "Through an open wood door, to the North you see the den. To the South you see a closed plain door.")
        >>> sorted(shown_no_ops(room, ["open door to north", "move south", "move north", "close fridge", "open wardrobe"]))
        ['close fridge', 'move south', 'open door to north', 'open wardrobe']
    """
    room = last_paragraph(observation)
    return {action for action in actions if _changes_nothing(room, action)}


def _changes_nothing(room: str, action: str) -> bool:
    door = _DOOR_ACTION.match(action)
    if door is not None:
        verb, side = door.group(1), door.group(2).capitalize()
        if verb == "open door to":
            return re.search(rf"Through an open [^.]*?, to the {side} you see", room) is not None
        return re.search(rf"[Tt]o the {side} you see a closed ", room) is not None
    container = _CONTAINER_ACTION.match(action)
    if container is None or container.group(2).startswith("door to "):
        return False
    verb, name = container.group(1), re.escape(container.group(2))
    if verb == "open":
        return re.search(rf"\ban open {name}\b", room) is not None
    return re.search(rf"\b{name} that is closed\b", room) is not None


def thing_toggled(observation: str, action: str) -> tuple[str, str] | None:
    """What an open or close sets (`TaskSpec.toggles`): a door, named by the two rooms it joins so that
    both sides name it alike, or a container in this room, with "open" or "closed"; None for other
    actions and for a door whose far room the description does not name (a closed one).

    Example:
        >>> thing_toggled("You are in the den. To the North you see the hall.", "close door to north")
        ('door between the den and the hall', 'closed')
        >>> thing_toggled("You are in the hall. Through an open door, to the South you see the den.", "open door to south")
        ('door between the den and the hall', 'open')
        >>> thing_toggled("You are in the kitchen. You see a fridge.", "open fridge")
        ('fridge in the kitchen', 'open')
    """
    toggle = _CONTAINER_ACTION.match(action)
    room = room_of(observation)
    if toggle is None or room is None:
        return None
    verb, what = toggle.group(1), toggle.group(2)
    state = "open" if verb == "open" else "closed"
    if what.startswith("door to "):
        beyond = room_beyond(observation, "move " + what.removeprefix("door to "))
        return (f"door between the {' and the '.join(sorted((room, beyond)))}", state) if beyond else None
    return f"{what} in the {room}", state


def _max_raw_score(raw) -> int | None:
    """The game's maximum raw score; the Python API does not expose it, its scorer does."""
    from py4j.protocol import Py4JError, Py4JNetworkError

    try:
        return int(round(raw.server.game().scorer().maxScore()))
    except Py4JNetworkError:
        raise
    except Py4JError:  # another engine version without this internal: sub-goals appear as reached
        return None


def _game(game: str) -> Game:
    name = game.removeprefix(f"{FAMILY}/")
    if name not in GAMES:
        raise ValueError(f"unknown TextWorldExpress game {game!r}; choose one of {', '.join(GAMES)}")
    return GAMES[name]


def _as_int(knob: str, value: int | str) -> int:
    try:
        if isinstance(value, float) and not value.is_integer():
            raise ValueError
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{knob} must be an integer, got {value!r}") from None


SPECS: tuple[TaskSpec, ...] = tuple(
    TaskSpec(
        name=f"{FAMILY}/{_game_spec.name}",
        factory=partial(TwxEnv, _game_spec.name),
        description=f"TextWorldExpress: {_game_spec.description}",
        folds=FOLDS,
        max_steps=_game_spec.max_steps,
        repeat_undoes_reward=_game_spec.repeat_undoes_reward,
        situation=last_paragraph,
        places=Places(here=room_of, leads_to=room_beyond),
        idle_actions=LOOKING,
        toggles=thing_toggled,
        undo_never_rewarded=True,
        no_ops=shown_no_ops,
    )
    for _game_spec in GAMES.values()
)
