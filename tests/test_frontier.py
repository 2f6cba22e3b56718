"""Frontier: moves back to places seen since the last reward are passed over while another choice
remains (`agent.frontier`, `TaskSpec.places`) unless they are the way to a place not seen yet, and
idle actions count after moves."""

from __future__ import annotations

import json
import re

import pytest

from crl.agent.app import start_run
from crl.agent.llm.scripted import ScriptedModel
from crl.tasks import registry
from crl.tasks.keyroom_world import room_through
from crl.tasks.places import Places, places_of
from crl.tasks.twx import room_beyond, room_of
from crl.tasks.user_task import UserTask
from tests.test_posterior_policy import settings_for

EXITS = {"hall": {"north": "closet", "south": "garden"}, "closet": {"south": "hall"}}
EXITS |= {"garden": {"north": "hall", "south": "shed"}, "shed": {"north": "garden"}}


def _here(observation: str) -> str | None:
    found = re.match(r"You are in the (\w+)\.", observation)
    return found.group(1) if found else None


def _leads_to(observation: str, action: str) -> str | None:
    if not action.startswith("go "):
        return None
    found = re.search(rf"{action[3:].capitalize()}: the (\w+)\.", observation)
    return found.group(1) if found else None


class KeyHouse(UserTask):
    """The key is in the shed at the far end; the box it goes in is in the closet beside the start."""

    name = "house/key"
    max_steps = 9
    places = Places(here=_here, leads_to=_leads_to)

    def reset(self, seed):
        self.room, self.held = "hall", False
        return self.observe(self.text(), goal="Put the key in the box.", actions=self.actions())

    def text(self) -> str:
        exits = " ".join(f"{d.capitalize()}: the {r}." for d, r in EXITS[self.room].items())
        return f"You are in the {self.room}. {exits}" + (" You hold a key." if self.held else "")

    def actions(self) -> list[str]:
        extra = {"shed": [] if self.held else ["take key"], "closet": ["put key in box"] if self.held else []}
        return [f"go {d}" for d in EXITS[self.room]] + extra.get(self.room, [])

    def step(self, action):
        if action == "put key in box":
            return self.finish("The key is in the box.", success=True)
        if action == "take key":
            self.held = True
            return self.proceed(self.text(), reward=0.5, actions=self.actions())
        self.room = EXITS[self.room][action.removeprefix("go ")]
        return self.proceed(self.text(), actions=self.actions())


SCORES = {"go north": 0.0, "go south": -0.3, "take key": 1.0, "put key in box": 1.0}


@pytest.fixture
def house(monkeypatch):
    monkeypatch.setitem(registry._TASKS, KeyHouse.name, KeyHouse.spec())
    return ScriptedModel(lambda messages: json.dumps(SCORES))


def test_the_frontier_explores_past_rooms_seen_and_goes_back_after_the_reward(crl_home, house):
    """A model that prefers north walks back to the hall from the garden and runs out of steps; with
    the frontier it goes on south to the shed, takes the key, and then the closet it has seen is open
    to it again: the reward started the count anew."""
    plain = start_run(settings_for(crl_home, frontier=False), KeyHouse.name, 1, model=house).episodes[0]
    assert not plain.success
    assert [s.action for s in plain.steps][:4] == ["go north", "go south", "go south", "go north"]

    episode = start_run(settings_for(crl_home, frontier=True), KeyHouse.name, 1, model=house).episodes[0]
    steps = episode.steps
    assert [s.action for s in steps] == [
        *("go north", "go south", "go south", "go south", "take key"),
        *("go north", "go north", "go north", "put key in box"),
    ]
    in_garden = steps[3].extra.policy
    assert in_garden.posterior["revisits"] == ["go north"] and steps[3].decided_by == "repeat-avoidance"
    assert "leads back to a place seen since the last reward: go north" in in_garden.reason
    # in the garden again, after the key: the hall is new again, the shed just left is not
    assert steps[6].extra.policy.posterior["revisits"] == ["go south"]
    # in the closet, a dead end: the move back to the hall is the way on to the unseen garden
    in_closet = steps[1].extra.policy
    assert in_closet.posterior["ways_out"] == ["go south"] and "revisits" not in in_closet.posterior
    assert "the shortest known way to a place not seen yet" in in_closet.reason

    from rich.console import Console

    from crl.agent.explain import render_explanation

    console = Console(record=True, width=200)
    render_explanation(console, episode, only_step=3)
    assert "leads back to a place seen" in console.export_text()
    render_explanation(console, episode, only_step=1)
    assert "the way to a place not seen" in console.export_text()


class DeadEnd(UserTask):
    """The key lies in the hall, where the game starts; the locked door is in the kitchen, a dead end
    with a vase to fiddle with."""

    name = "house/deadend"
    max_steps = 8
    places = Places(here=_here, leads_to=_leads_to)

    def reset(self, seed):
        self.room, self.held, self.vase = "hall", False, False
        return self.observe(self.text(), goal="Unlock the door.", actions=self.actions())

    def text(self) -> str:
        exits = "South: the kitchen." if self.room == "hall" else "North: the hall."
        things = " A key." if self.room == "hall" and not self.held else ""
        return f"You are in the {self.room}. {exits}{things}" + (" You hold a vase." if self.vase else "")

    def actions(self) -> list[str]:
        if self.room == "hall":
            return ["go south"] + ([] if self.held else ["take key"])
        return ["go north", "drop vase" if self.vase else "take vase"] + (["unlock door"] if self.held else [])

    def step(self, action):
        if action == "unlock door":
            return self.finish("The door opens.", success=True)
        if action in ("take key", "take vase", "drop vase"):
            self.held = self.held or action == "take key"
            self.vase = action == "take vase"
            subgoals = {"key": self.held}
            return self.proceed(self.text(), actions=self.actions(), subgoals=subgoals)
        self.room = "kitchen" if action == "go south" else "hall"
        return self.proceed(self.text(), actions=self.actions(), subgoals={"key": self.held})


def test_where_every_place_mapped_was_visited_going_back_is_not_passed_over(crl_home):
    """In the kitchen, a dead end, every place the episode knows was visited. The first action there
    still comes before the move back (the vase), but after it the move back is the only way on: it
    is not counted as tried, and the model's liking for it beats the vase. Before, the loop rules
    kept the agent fiddling with the vase until the steps ran out."""
    scores = {
        "go south": 1.0,
        "go north": 0.6,
        "take vase": 0.5,
        "drop vase": 0.5,
        "take key": -1.0,
        "unlock door": 1.0,
    }
    model = ScriptedModel(lambda messages: json.dumps(scores))
    registry._TASKS[DeadEnd.name] = DeadEnd.spec()
    try:
        episode = start_run(settings_for(crl_home, frontier=True), DeadEnd.name, 1, model=model).episodes[0]
    finally:
        registry._TASKS.pop(DeadEnd.name, None)
    actions = ["go south", "take vase", "go north", "take key", "go south", "unlock door"]
    assert [s.action for s in episode.steps] == actions and episode.success
    arrived, acted = (episode.steps[i].extra.policy.posterior for i in (1, 2))
    assert arrived["revisits"] == ["go north"]
    assert "revisits" not in acted and "ways_out" not in acted


def test_places_of_reads_the_declaration():
    assert places_of(KeyHouse.name) is None  # not registered outside the fixture
    assert places_of("twx/coin").here is room_of and places_of("keyroom/compound").here is room_of
    assert places_of("sciworld/boil") is None  # ScienceWorld names no places


def test_keyroom_names_the_room_and_the_exits_open_to_it():
    text = (
        "You open the door.\n\nYou are in the armoury.\nYou see a red candle.\n"
        "Exits: east through the open iron door to the workshop; south to the gallery; west through a locked oak door.\n"
        "You are carrying a copper key."
    )
    assert room_of(text) == "armoury"
    assert room_through(text, "go east") == "workshop" and room_through(text, "go south") == "gallery"
    assert room_through(text, "go west") is None and room_through(text, "go north") is None
    assert room_through(text, "take red candle") is None and room_of("Nothing happens.") is None


def test_a_sub_goal_reached_without_reward_opens_the_rooms_seen_again(crl_home, house):
    """keyroom rewards only the end, but taking the key is a sub-goal: after it, the closet seen on
    the way is a place to go back to (the box is there), not a revisit."""

    class SubgoalHouse(KeyHouse):
        name = "house/subgoal"

        def step(self, action):
            if action == "take key":
                self.held = True
                return self.proceed(self.text(), actions=self.actions(), subgoals={"key": True, "box": False})
            return super().step(action)

    registry._TASKS[SubgoalHouse.name] = SubgoalHouse.spec()
    try:
        episode = start_run(settings_for(crl_home, frontier=True), SubgoalHouse.name, 1, model=house).episodes[0]
    finally:
        registry._TASKS.pop(SubgoalHouse.name, None)
    actions = [s.action for s in episode.steps]
    assert actions == [
        *("go north", "go south", "go south", "go south", "take key"),
        *("go north", "go north", "go north", "put key in box"),
    ]
    assert episode.success and episode.steps[4].reward == 0
    assert episode.steps[6].extra.policy.posterior["revisits"] == ["go south"]


def test_textworldexpress_names_rooms_and_open_exits_only():
    text = (
        "You open the door.\n\nYou are in the kitchen. A stove. \nTo the North you see a closed patio door. "
        "Through an open plain door, to the South you see the pantry. To the West you see the living room."
    )
    assert room_of(text) == "kitchen"
    assert room_beyond(text, "move south") == "pantry" and room_beyond(text, "move west") == "living room"
    assert room_beyond(text, "move north") is None and room_beyond(text, "move east") is None
    assert room_beyond(text, "open door to north") is None


def test_a_known_no_op_comes_after_a_move_back_when_everything_was_tried(crl_home, house):
    """In the closet (a dead end) with "look" known to change nothing, going back beats looking again;
    while the garden is unseen, going back is the way out and is not counted as tried at all."""
    from crl.agent.session import EpisodeSession, LoopConfig
    from crl.memory.trajectory import Episode

    class Looking(KeyHouse):
        name = "house/look"

        def actions(self):
            return [*super().actions(), "look"]

        def step(self, action):
            return self.proceed(self.text(), actions=self.actions()) if action == "look" else super().step(action)

    registry._TASKS[Looking.name] = Looking.spec()
    try:
        episode = Episode(episode_id="look-0000", run_id="look", task=Looking.name, seed=0, goal="")
        session = EpisodeSession(Looking(), episode, LoopConfig(max_steps=9, react=False), lambda t: 1, lambda m: 1)
        from crl.agent.llm.base import Completion

        for action in ("look", "go north"):
            session.apply(Completion(text=f" {action}"))
        # the hall leads on to the garden, not seen yet: going back is the way out, not a revisit
        assert session.ways_out() == {"go south"} and "go south" not in session.tries_here()
        for action in ("go south", "go south", "go south", "go north", "go north", "go north"):
            session.apply(Completion(text=f" {action}"))
        assert session.ways_out() == set()  # every room seen: no way out is known
        tries = session.tries_here()
        assert tries["look"] == 2 and tries["go south"] == 1  # the idle look, the move back to the hall
    finally:
        registry._TASKS.pop(Looking.name, None)


def test_a_scored_argmax_passed_over_is_not_tried_but_a_generated_reply_is(crl_home, house):
    """The posterior passing over the model's scored argmax does not take it: back in the same room it
    is still untried (it was counted as tried before, and on coin that hid the way out of a dead
    end). A generated reply that memory overrode still counts as tried, as the loop breaker wants."""
    from crl.agent.llm.base import Completion
    from crl.agent.session import EpisodeSession, LoopConfig
    from crl.memory.trajectory import Episode

    def walk(detail: dict | None) -> set[str]:
        episode = Episode(episode_id="walk-0000", run_id="walk", task=KeyHouse.name, seed=0, goal="")
        config = LoopConfig(max_steps=9, react=False, frontier=False)
        session = EpisodeSession(KeyHouse(), episode, config, lambda t: 1, lambda m: 1)
        choice = ("go south", "memory", "memory overrode the model", *([detail] if detail else []))
        session.apply(Completion(text=" go north"), choose=lambda action: choice)
        session.apply(Completion(text=" go north"))
        return session.tried_here()

    assert walk({"chosen": "go south", "model_best": "go north"}) == {"go south"}
    assert walk(None) == {"go south", "go north"}


def test_the_way_out_is_the_first_move_of_a_shortest_way_to_a_room_not_seen():
    from crl.agent.place_map import PlaceMap

    house = PlaceMap(
        {
            "hall": {"go west": "den", "go east": "kitchen", "go north": "landing"},
            "den": {"go east": "hall"},
            "kitchen": {"go west": "hall", "go south": "yard"},
            "landing": {"go south": "hall", "go up": "attic"},
        }
    )
    seen = {"hall", "den", "kitchen", "landing"}
    assert house.steps_to_unvisited("den", seen) == 3  # den, hall, kitchen, yard
    assert house.ways_out({"go east": "hall"}, seen) == {"go east"}  # the den, a dead end
    # from the hall the yard and the attic are one room away each: both ways count
    assert house.ways_out({"go west": "den", "go east": "kitchen", "go north": "landing"}, seen) == {
        "go east",
        "go north",
    }
    assert house.ways_out({"go east": "kitchen", "go south": "yard"}, seen) == set()  # a new room is right here
    assert house.ways_out({"go east": "hall"}, seen | {"yard", "attic"}) == set()  # nothing left unseen
