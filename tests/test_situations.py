"""Situations: observations that show the same state count as the same place for the loop rules."""

from __future__ import annotations

import json

from crl.agent.app import open_bank, start_run
from crl.agent.llm.scripted import ScriptedModel
from crl.tasks.keyroom import KeyroomEnv
from crl.tasks.registry import fold_seeds
from crl.tasks.situations import situation_of, whole
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
    assert situation_of("twx/coin") is whole
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
