"""Situations: observations that show the same state count as the same place for the loop rules."""

from __future__ import annotations

import importlib.util
import json

import pytest
from typer.testing import CliRunner

from crl.agent.app import open_bank, start_run
from crl.agent.cli.main import app
from crl.agent.llm.scripted import ScriptedModel
from crl.tasks.keyroom import KeyroomEnv
from crl.tasks.registry import fold_seeds
from crl.tasks.situations import last_paragraph, situation_of, whole
from crl.tasks.twx import room_of
from tests.test_posterior_policy import settings_for

TASK = "keyroom/key"
SEED_WITH_CLOCK = fold_seeds(TASK, "train", 2)[1]


def test_taking_then_dropping_a_distractor_returns_to_the_same_keyroom_situation():
    env = KeyroomEnv("key")
    start = env.reset(SEED_WITH_CLOCK)
    assert "take grey clock" in start.admissible_actions
    holding = env.step("take grey clock").observation
    back = env.step("drop grey clock").observation
    situation = situation_of(TASK)
    assert back.text != start.text and situation(back.text) == situation(start.text)
    assert situation(holding.text) != situation(start.text)
    assert "You drop" not in situation(back.text)


def test_tasks_without_a_declared_situation_use_the_whole_observation():
    assert situation_of("tw/simple") is whole
    assert situation_of("no-such/task") is whole
    assert whole("You drop it.\n\nA room.") == "You drop it.\n\nA room."


def test_the_posterior_does_not_take_back_what_it_just_dropped(crl_home):
    """A model that likes the clock either way would take and drop it forever; back in the situation
    it took the clock from, taking it again is passed over."""
    model = ScriptedModel(lambda messages: json.dumps({"take grey clock": 0.0, "drop grey clock": 0.0, "look": -1.0}))
    settings = settings_for(crl_home, max_steps=4, loop_breaker=False)
    steps = start_run(settings, TASK, 1, seed_start=1, model=model).episodes[0].steps
    assert [st.action for st in steps[:2]] == ["take grey clock", "drop grey clock"]
    assert steps[2].action != "take grey clock" and steps[2].decided_by == "repeat-avoidance"
    assert steps[2].extra.policy.posterior["avoided"] == ["take grey clock"]


def test_a_stored_take_after_a_drop_is_flagged_as_a_loop(crl_home):
    """Memory's `repeated` flag (what episodic control penalises) compares situations too."""
    replies = [" take grey clock", " drop grey clock", " take grey clock"]
    settings = settings_for(crl_home, bank=True, policy="llm", reply_format="action", max_steps=3, loop_breaker=False)
    start_run(settings, TASK, 1, seed_start=1, model=ScriptedModel(replies))
    with open_bank(settings) as bank:
        steps = sorted(bank.ls(kind="step"), key=lambda r: r.index)
    assert [s.action for s in steps] == ["take grey clock", "drop grey clock", "take grey clock"]
    assert [s.repeated for s in steps] == [False, False, True]


def test_a_stored_take_dropped_again_is_a_detour_off_the_loop_erased_path(crl_home):
    """Loop erasure (StepRecord.detour): the first take and its drop come back around to where the
    episode stood; the second take is the step on the path."""
    replies = [" take grey clock", " drop grey clock", " take grey clock"]
    settings = settings_for(crl_home, bank=True, policy="llm", reply_format="action", max_steps=3, loop_breaker=False)
    start_run(settings, TASK, 1, seed_start=1, model=ScriptedModel(replies))
    with open_bank(settings) as bank:
        steps = sorted(bank.ls(kind="step"), key=lambda r: r.index)
    assert [s.detour for s in steps] == [True, True, False]


def test_a_user_task_declares_its_situation_with_a_staticmethod():
    from crl.tasks.user_task import UserTask

    class Rooms(UserTask):
        name = "rooms/one"

        @staticmethod
        def situation(observation):
            return observation.splitlines()[-1]

    assert Rooms.spec().situation("You wait.\nIn the hall.") == "In the hall."
    assert UserTask.situation is None


TWC = "twx/twc?numLocations=1&numItemsToPutAway=2"
SHIRT = "dirty brown T-shirt"
needs_twx = pytest.mark.skipif(
    importlib.util.find_spec("textworld_express") is None,
    reason="needs the envs extra: pip install 'complementary-rl[envs]'",
)


def twc_session(loop_breaker: bool = True, held_rewards: bool = True):
    from crl.agent.session import EpisodeSession, LoopConfig
    from crl.memory.trajectory import Episode
    from crl.tasks.registry import make_env

    config = LoopConfig(max_steps=10, loop_breaker=loop_breaker, held_rewards=held_rewards, prefill=True, react=False)
    episode = Episode(episode_id="twc-0000", run_id="twc", task=TWC, seed=10, goal="")
    return EpisodeSession(make_env(TWC), episode, config, lambda t: len(t.split()), lambda m: len(m) * 50)


def act(session, action: str):
    from crl.agent.llm.base import Completion

    return session.apply(Completion(text=f" {action}"))


def test_only_twc_declares_that_repeating_a_rewarded_action_undoes_it():
    from crl.tasks.situations import repeat_undoes_reward

    assert repeat_undoes_reward(TWC) and repeat_undoes_reward("twx/twc")
    assert not repeat_undoes_reward("twx/coin") and not repeat_undoes_reward(TASK)
    assert not repeat_undoes_reward("no-such/task")


@needs_twx
def test_twc_does_not_take_back_an_item_it_put_away_but_retakes_one_put_in_a_wrong_place():
    """Real twc world 10: the shirt belongs in the laundry basket, not on the work table. Taking it
    back out of the basket would lose the put's point, so the loop breaker replaces that reply; after
    a wrong put (which lost the take's point) taking it again earns the point back and is kept."""
    session = twc_session()
    try:
        assert act(session, f"take {SHIRT}").reward > 0
        assert act(session, f"put {SHIRT} in work table").reward < 0
        assert session.held_rewards() == set()
        again = act(session, f"take {SHIRT}")
        assert again.action == f"take {SHIRT}" and again.reward > 0 and again.decided_by == "llm"
        assert act(session, f"put {SHIRT} in laundry basket").reward > 0
        assert session.held_rewards() == {f"take {SHIRT}", f"put {SHIRT} in laundry basket"}
        assert f"take {SHIRT}" in session.tried_here() and session.tries_here()[f"take {SHIRT}"] == 1
        undo = act(session, f"take {SHIRT}")
        assert undo.decided_by == "loop-breaker" and undo.action != f"take {SHIRT}"
        assert undo.extra.loop_break.replaced == f"take {SHIRT}" and undo.reward >= 0
    finally:
        session.env.close()


@needs_twx
@pytest.mark.parametrize("switch", [{"loop_breaker": False}, {"held_rewards": False}])
def test_without_the_loop_breaker_or_with_the_rule_off_a_rewarded_action_may_be_undone(switch):
    session = twc_session(**switch)
    try:
        act(session, f"take {SHIRT}")
        act(session, f"put {SHIRT} in laundry basket")
        assert session.held_rewards() == set()
        assert act(session, f"take {SHIRT}").reward < 0
    finally:
        session.env.close()


@needs_twx
def test_the_posterior_on_twc_passes_over_taking_back_what_it_put_away(crl_home):
    """A model that likes the shirt's take best, then its put: once the shirt is in the basket, its
    take is avoided as a held reward (named so in the step's record), not replayed to lose the point."""
    take, put = f"take {SHIRT}", f"put {SHIRT} in laundry basket"

    def scores(messages):
        return json.dumps({take: 0.0, put: -0.5})

    settings = settings_for(crl_home, max_steps=3)
    result = start_run(settings, TWC, 1, seed_start=10, model=ScriptedModel(scores))
    steps = result.episodes[0].steps
    assert [s.action for s in steps[:2]] == [take, put] and steps[1].reward > 0
    third = steps[2]
    assert third.action != take and third.reward >= 0 and third.decided_by == "repeat-avoidance"
    assert third.extra.policy.posterior["held"] == [take]
    assert "would undo a reward the episode holds" in third.extra.policy.reason
    shown = CliRunner().invoke(
        app, ["--home", str(crl_home), "explain", result.episodes[0].run_id, "0", "2"], env={"COLUMNS": "250"}
    )
    assert shown.exit_code == 0, shown.output
    assert "would undo a held reward" in shown.output


COIN = "twx/coin?numLocations=5&numDistractorItems=0&includeDoors=0"


def test_a_textworldexpress_situation_is_the_room_after_the_reply():
    room = "You are in the kitchen. You see a stove. \nTo the West you see the pantry."
    situation = situation_of(COIN)
    assert situation is last_paragraph
    assert situation(f"Inventory: \n  Your inventory is currently empty.\n\n{room}") == situation(room) == room.strip()


def coin_session(idle_actions: bool = True):
    from crl.agent.session import EpisodeSession, LoopConfig
    from crl.memory.trajectory import Episode
    from crl.tasks.registry import make_env

    config = LoopConfig(max_steps=10, idle_actions=idle_actions, prefill=True, react=False)
    episode = Episode(episode_id="coin-0000", run_id="coin", task=COIN, seed=10, goal="")
    return EpisodeSession(make_env(COIN), episode, config, lambda t: len(t.split()), lambda m: len(m) * 50)


def a_move(session) -> str:
    return next(a for a in session.observation.admissible_actions if a.startswith("move "))


def undeclared(monkeypatch):
    """TextWorldExpress without its declared idle actions, so the episode has to learn them."""
    monkeypatch.setattr("crl.agent.session.declared_idle_actions", lambda task: frozenset())


@needs_twx
def test_the_declared_idle_actions_count_from_the_first_step():
    session = coin_session()
    try:
        assert session.idle_actions() == {"look around", "inventory"}
        assert session.tries_here() == {"look around": 2, "inventory": 2}
    finally:
        session.env.close()
    off = coin_session(idle_actions=False)
    try:
        assert off.tried_here() == set()
    finally:
        off.env.close()


@needs_twx
def test_an_action_that_changed_nothing_anywhere_is_passed_over_in_a_new_room(monkeypatch):
    """Real coin world 10, the idle actions not declared: "look around" and "inventory" only repeat
    the room the observation already describes. Once each changed nothing, they count as tried in
    every room, and back in the first room after "inventory" the agent is where it was (the same
    situation), so the move it already made there counts as tried too."""
    undeclared(monkeypatch)
    session = coin_session()
    try:
        start = session.here()
        assert act(session, "look around").reward == 0 and session.idle_actions() == {"look around"}
        act(session, "inventory")
        assert session.here() == start and {"look around", "inventory"} <= session.tried_here()
        move = a_move(session)
        act(session, move)
        assert session.here() != start
        assert session.idle_actions() == {"look around", "inventory"}
        assert {"look around", "inventory"} <= session.tried_here() and move not in session.idle_actions()
    finally:
        session.env.close()


@needs_twx
def test_with_idle_actions_off_a_no_op_counts_only_where_it_was_tried():
    session = coin_session(idle_actions=False)
    try:
        act(session, "look around")
        act(session, a_move(session))
        assert "look around" not in session.tried_here()
    finally:
        session.env.close()


@needs_twx
def test_the_posterior_looks_around_once_on_coin(crl_home, monkeypatch):
    """A model that likes "look around" best everywhere never takes it where the task declares it idle;
    undeclared, it takes it once: after it changed nothing, the posterior passes it over in every room
    (`decided_by` repeat-avoidance, named in the record)."""

    def scores(messages):
        return json.dumps({"look around": 0.0, "inventory": -0.2})

    settings = settings_for(crl_home, max_steps=6)
    steps = start_run(settings, COIN, 1, seed_start=10, model=ScriptedModel(scores)).episodes[0].steps
    assert not {"look around", "inventory"} & {s.action for s in steps}
    assert all("look around" in s.extra.policy.posterior["avoided"] for s in steps)
    undeclared(monkeypatch)
    steps = start_run(settings, COIN, 1, seed_start=10, model=ScriptedModel(scores)).episodes[0].steps
    assert [s.action for s in steps].count("look around") == 1
    assert [s.action for s in steps].count("inventory") == 1
    later = steps[2:]
    assert later and all("look around" in s.extra.policy.posterior["avoided"] for s in later)


@needs_twx
def test_the_loop_breaker_replaces_a_repeat_with_a_move_back_rather_than_an_idle_action():
    """Real coin world 10, the model generating: in the pantry, a dead end, asking for the inventory a
    second time is replaced by the move back to the kitchen, not by "look around" (declared idle)."""
    session = coin_session()
    try:
        for action in ("look around", "move south", "inventory"):
            act(session, action)
        assert room_of(session.observation.text) == "pantry"
        # the kitchen leads on to rooms not seen yet: the move back is the way out, untried here
        assert session.tries_here() == {"inventory": 2, "look around": 2} and session.ways_out() == {"move north"}
        step = act(session, "inventory")
        assert step.decided_by == "loop-breaker" and step.action == "move north"
    finally:
        session.env.close()
