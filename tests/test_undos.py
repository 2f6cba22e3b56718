"""Toggles: on a task that declares what its actions set (`TaskSpec.toggles`, or a `UserTask`'s
`inverse_action` pairs), the loop rules pass over setting a thing to the state the episode set it to
and over setting back one changed since the last reward (`agent.undos`); and a task's declared
no-ops (`TaskSpec.no_ops`)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from crl.agent.app import start_run
from crl.agent.llm.base import Completion
from crl.agent.llm.scripted import ScriptedModel
from crl.agent.session import EpisodeSession, LoopConfig
from crl.memory.trajectory import Episode
from crl.tasks import registry
from crl.tasks.situations import declared_no_ops
from crl.tasks.toggles import declared_toggles, undo_never_rewarded
from crl.tasks.twx import thing_toggled
from crl.tasks.user_task import UserTask
from tests.test_posterior_policy import settings_for
from tests.test_situations import needs_twx


def _box_inverse(action: str) -> str | None:
    return {"open box": "close box", "close box": "open box"}.get(action)


class GemBox(UserTask):
    """A gem in a closed box: open it, take the gem (a point), put it on the shelf (the win)."""

    name = "box/gem"
    max_steps = 6
    inverse_action = staticmethod(_box_inverse)

    def reset(self, seed):
        self.open, self.held = False, False
        return self.observe(self.text(), goal="Put the gem on the shelf.", actions=self.actions())

    def text(self) -> str:
        box = "an open box" + ("" if self.held else " with a gem in it") if self.open else "a closed box"
        return f"You see {box} and a shelf." + (" You hold a gem." if self.held else "")

    def actions(self) -> list[str]:
        return ["open box", "close box", "look"] + (["put gem on shelf"] if self.held else ["take gem"])

    def step(self, action):
        if action == "put gem on shelf":
            return self.finish("The gem is on the shelf.", success=True)
        reward = 0.0
        if action == "take gem" and self.open and not self.held:
            self.held, reward = True, 0.5
        elif action in ("open box", "close box"):
            self.open = action == "open box"
        return self.proceed(self.text(), reward=reward, actions=self.actions())


SCORES = {"open box": 0.0, "close box": -0.1, "take gem": -0.2, "look": -0.3, "put gem on shelf": -0.4}


@pytest.fixture
def gem_box(monkeypatch):
    monkeypatch.setitem(registry._TASKS, GemBox.name, GemBox.spec())
    return ScriptedModel(lambda messages: json.dumps(SCORES))


def test_twx_names_a_door_alike_from_both_sides_and_a_container_by_its_room():
    corridor = "You are in the corridor. Through an open wood door, to the North you see the bedroom."
    bedroom = "You are in the bedroom. A bed. Through an open wood door, to the South you see the corridor."
    door = "door between the bedroom and the corridor"
    assert thing_toggled(corridor, "open door to north") == (door, "open")
    assert thing_toggled(bedroom, "close door to south") == (door, "closed")
    assert thing_toggled("You are in the hall. To the West you see a closed plain door.", "open door to west") is None
    assert thing_toggled("You are in the kitchen. A fridge.", "close fridge") == ("fridge in the kitchen", "closed")
    assert thing_toggled(corridor, "move north") is None and thing_toggled(corridor, "take coin") is None
    assert declared_toggles("twx/coin?includeDoors=1") is thing_toggled and declared_toggles("keyroom/key") is None
    assert declared_toggles(GemBox.name) is None  # registered only by the gem_box fixture


def test_a_model_that_likes_opening_and_closing_gets_on_with_the_task(crl_home, gem_box):
    """Without the rule, a model that scores open above close above the rest opens the box, opens it
    again (it is open), closes it, closes it again; with it, the repeat is a known no-op, the close an
    undo, and the gem is taken next."""
    plain = start_run(settings_for(crl_home, undos=False), GemBox.name, 1, model=gem_box).episodes[0]
    assert [s.action for s in plain.steps][:4] == ["open box", "open box", "close box", "close box"]
    assert not plain.success

    episode = start_run(settings_for(crl_home, undos=True), GemBox.name, 1, model=gem_box).episodes[0]
    assert [s.action for s in episode.steps][:2] == ["open box", "take gem"] and episode.success
    taking = episode.steps[1].extra.policy
    assert taking.posterior["undoes"] == ["close box"] and taking.decided_by == "repeat-avoidance"
    assert "would undo a change this episode made: close box" in taking.reason
    assert "open box" in taking.posterior["avoided"]  # opening the open box is a known no-op

    from rich.console import Console

    from crl.agent.explain import render_explanation

    console = Console(record=True, width=200)
    render_explanation(console, episode, only_step=1)
    assert "undoes a change this episode made" in console.export_text()


def _session(config: LoopConfig | None = None) -> EpisodeSession:
    episode = Episode(episode_id="gem-0000", run_id="gem", task=GemBox.name, seed=0, goal="")
    config = config or LoopConfig(max_steps=9, react=False)
    return EpisodeSession(GemBox(), episode, config, lambda t: 1, lambda m: 1)


def _force(session: EpisodeSession, action: str) -> None:
    session.apply(Completion(text=f" {action}"), choose=lambda _: (action, "memory", "forced"))


def test_an_undo_taken_anyway_ends_the_change_and_a_reward_ends_the_undo(gem_box):
    session = _session()
    assert session.undoes() == set() and "open box" not in session.no_ops_here()
    _force(session, "open box")
    assert session.undoes() == {"close box"} and "open box" in session.no_ops_here()
    assert "close box" in session.tried_here()
    _force(session, "close box")  # undone: back where it started, and opening is open to choice again
    assert session.undoes() == set() and "open box" not in session.no_ops_here()
    assert "close box" in session.no_ops_here()
    _force(session, "open box")
    _force(session, "take gem")  # the reward: what the task needs next may need the box closed
    assert session.undoes() == set() and "open box" in session.no_ops_here()  # still open, still a no-op


def test_on_a_task_that_never_pays_for_an_undo_the_undo_outlasts_the_reward(gem_box, monkeypatch):
    """`TaskSpec.undo_never_rewarded`: closing the box after the gem's point still only undoes."""
    monkeypatch.setitem(registry._TASKS, GemBox.name, replace(GemBox.spec(), undo_never_rewarded=True))
    session = _session()
    _force(session, "open box")
    _force(session, "take gem")
    assert session.undoes() == {"close box"} and "close box" in session.tried_here()
    assert undo_never_rewarded("twx/twc") and not undo_never_rewarded("keyroom/key")


def test_the_rule_is_off_without_the_loop_breaker_or_the_declaration(gem_box, monkeypatch):
    for config in (LoopConfig(max_steps=9, react=False, undos=False), LoopConfig(max_steps=9, loop_breaker=False)):
        session = _session(config)
        _force(session, "open box")
        assert session.undoes() == set() and "open box" not in session.no_ops_here()
    monkeypatch.setitem(registry._TASKS, GemBox.name, replace(GemBox.spec(), toggles=None))
    session = _session()
    _force(session, "open box")
    assert session.undoes() == set()


COIN_DOORS = "twx/coin?numLocations=5&numDistractorItems=0&includeDoors=1"
DIRECTIONS = ("north", "south", "east", "west")
DOOR_LOVER = {
    **{f"open door to {d}": 0.0 for d in DIRECTIONS},
    **{f"close door to {d}": -0.2 for d in DIRECTIONS},
    **{"take coin": -0.3, "look around": -0.4, "inventory": -0.4},
    **{f"move {d}": -0.5 for d in DIRECTIONS},
}


@needs_twx
def test_coin_with_doors_a_door_lover_walks_through_the_door_it_opened(crl_home):
    """The real engine, dev seed 10001 (a kitchen with closed doors south and west, the coin beyond):
    a model that scores opening and closing doors above moving, as the embedded model does, spends its
    ten steps opening, reopening and closing; with the toggle rule and the no-ops the room shows it opens
    both doors, walks through the one it opened last (`agent.follow_through`) and finds the coin."""
    model = ScriptedModel(lambda messages: json.dumps(DOOR_LOVER))

    def play(undos: bool) -> Episode:
        settings = settings_for(crl_home, undos=undos, idle_actions=undos, max_steps=10)
        return start_run(settings, COIN_DOORS, 1, fold="dev", seeds=[10001], model=model).episodes[0]

    plain = play(False)
    assert not plain.success and sum(s.action.startswith(("open", "close")) for s in plain.steps) >= 8
    episode = play(True)
    actions = [s.action for s in episode.steps]
    assert episode.success and actions[:3] == ["open door to south", "open door to west", "move west"]


def test_twx_reads_which_door_actions_change_nothing_from_the_room():
    from crl.tasks.twx import shown_no_ops

    room = (
        "You open the door.\n\nYou are in the bedroom. You see a bed. Through an open wood door, to the South you "
        "see the corridor. To the West you see a closed screen door. To the East you see the hallway."
    )
    listed = [f"{verb} {side}" for verb in ("open door to", "close door to", "move") for side in ("south", "west")]
    assert shown_no_ops(room, listed) == {"open door to south", "close door to west", "move west"}
    assert shown_no_ops(room, ["move east", "take coin", "look around"]) == set()
    kitchen = "You are in the kitchen. You see a fridge that is closed. You also see an open dishwasher, that is empty."
    containers = ["open fridge", "close fridge", "open dishwasher", "close dishwasher"]
    assert shown_no_ops(kitchen, containers) == {"close fridge", "open dishwasher"}
    assert declared_no_ops("twx/coin?includeDoors=1") is shown_no_ops and declared_no_ops("keyroom/key") is None


def test_declared_no_ops_count_before_one_is_wasted(gem_box, monkeypatch):
    """The box says it is closed: closing it is a known no-op from the first step, with
    `agent.idle_actions`; without the declaration it is not known until tried."""

    def box_no_ops(observation, actions):
        return {"close box"} & set(actions) if "a closed box" in observation else set()

    monkeypatch.setitem(registry._TASKS, GemBox.name, replace(GemBox.spec(), no_ops=box_no_ops))
    assert "close box" in _session().no_ops_here() and "close box" in _session().tries_here()
    assert "close box" not in _session(LoopConfig(max_steps=9, react=False, idle_actions=False)).no_ops_here()
    monkeypatch.setitem(registry._TASKS, GemBox.name, GemBox.spec())
    assert "close box" not in _session().no_ops_here()


@needs_twx
def test_the_door_opened_from_one_side_is_known_from_the_other():
    """The real engine, dev seed 10001: the kitchen's door south opened, the player walks through; in the
    backyard the same door is "to the North": opening it is a no-op and closing it an undo."""
    from crl.tasks.registry import make_env

    episode = Episode(episode_id="doors-0000", run_id="doors", task=COIN_DOORS, seed=10001, goal="")
    config = LoopConfig(max_steps=10, react=False)
    session = EpisodeSession(make_env(COIN_DOORS), episode, config, lambda t: 1, lambda m: 1)
    try:
        for action in ("open door to south", "move south"):
            _force(session, action)
        assert session.observation.text.rsplit("\n\n", 1)[-1].startswith("You are in the backyard")
        assert session.undoes() == {"close door to north"}
        assert {"open door to north", "close door to north"} <= session.tried_here()
        assert "open door to north" in session.no_ops_here()
    finally:
        session.env.close()
