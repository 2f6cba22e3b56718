"""Follow-through (`agent.follow_through`): after an action opened a way where the agent stands, a move
through it comes before any other move the policy would take."""

from __future__ import annotations

import json

from crl.agent.app import start_run
from crl.agent.llm.scripted import ScriptedModel
from crl.agent.posterior import PosteriorConfig, decide
from crl.agent.session import EpisodeSession, LoopConfig
from crl.memory.trajectory import Episode
from tests.test_posterior_policy import settings_for
from tests.test_situations import needs_twx
from tests.test_undos import COIN_DOORS, DIRECTIONS

PROBS = {"move north": 0.4, "take coin": 0.3, "move east": 0.2, "move west": 0.1}
MOVES = {"move north", "move east", "move west"}


def test_the_way_just_opened_replaces_another_move_but_not_another_kind_of_action():
    decision = decide(PROBS, {}, PosteriorConfig(), ahead={"move east"}, moves=MOVES)
    assert decision.chosen == "move east" and decision.decided_by == "follow-through"
    assert decision.reason.endswith("goes through the way the last action opened")
    assert decision.to_dict()["ahead"] == ["move east"] and decision.to_dict()["followed_through"]
    chosen_anyway = decide({**PROBS, "move east": 0.5}, {}, PosteriorConfig(), ahead={"move east"}, moves=MOVES)
    assert chosen_anyway.chosen == "move east" and chosen_anyway.decided_by == "llm"
    assert "followed_through" not in chosen_anyway.to_dict() and "last action opened" not in chosen_anyway.reason
    coin_first = {**PROBS, "take coin": 0.5}
    assert decide(coin_first, {}, PosteriorConfig(), ahead={"move east"}, moves=MOVES).chosen == "take coin"
    assert decide(PROBS, {}, PosteriorConfig(), ahead={"move east"}, moves=()).chosen == "move north"


def test_a_way_already_taken_here_is_not_followed_again():
    decision = decide(PROBS, {}, PosteriorConfig(), avoid={"move east"}, ahead={"move east"}, moves=MOVES)
    assert decision.chosen == "move north" and decision.decided_by == "llm" and "ahead" not in decision.to_dict()


def _force(session: EpisodeSession, action: str) -> None:
    session.apply(None, lambda _: (action, "test", "forced"))


@needs_twx
def test_opening_a_door_puts_the_room_behind_it_ahead_until_the_agent_moves():
    """The real engine, dev seed 10003: the kitchen's east door leads to the pantry. Opening it puts
    "move east" ahead; moving anywhere, or the flag off, leaves nothing ahead."""
    from crl.tasks.registry import make_env

    def session(follow_through: bool) -> EpisodeSession:
        episode = Episode(episode_id="ahead-0000", run_id="ahead", task=COIN_DOORS, seed=10003, goal="")
        config = LoopConfig(max_steps=10, react=False, follow_through=follow_through)
        return EpisodeSession(make_env(COIN_DOORS), episode, config, lambda t: 1, lambda m: 1)

    on, off = session(True), session(False)
    try:
        assert on.ahead() == set()
        _force(on, "open door to east")
        _force(off, "open door to east")
        assert on.ahead() == {"move east"} and "move east" in on.listed_moves() and off.ahead() == set()
        _force(on, "move north")
        assert on.observation.text.rsplit("\n\n", 1)[-1].startswith("You are in the corridor")
        assert on.ahead() == set()
    finally:
        on.env.close()
        off.env.close()


@needs_twx
def test_coin_with_doors_the_agent_goes_through_the_door_it_opened(crl_home):
    """Dev seed 10003, lost at stop 56 by the embedded model: it opened the kitchen's east door, then
    walked north and ran out of steps before coming back. A model that likes north does the same
    without the rule; with it, the agent enters the pantry it opened, where the coin is."""
    model = ScriptedModel(
        lambda messages: json.dumps(
            {f"open door to {d}": 0.0 for d in DIRECTIONS}
            | {"move north": -0.2, "take coin": -0.3}
            | {f"move {d}": -0.4 for d in DIRECTIONS if d != "north"}
        )
    )

    def play(follow_through: bool) -> Episode:
        settings = settings_for(crl_home, follow_through=follow_through, max_steps=4)
        return start_run(settings, COIN_DOORS, 1, fold="dev", seeds=[10003], model=model).episodes[0]

    plain, followed = play(False), play(True)
    assert not plain.success and [s.action for s in plain.steps][:2] == ["open door to east", "move north"]
    assert followed.success and [s.action for s in followed.steps] == ["open door to east", "move east", "take coin"]
    through = followed.steps[1]
    assert through.decided_by == "follow-through" and through.extra.policy.posterior["ahead"] == ["move east"]
    assert "goes through the way the last action opened" in through.extra.policy.reason
