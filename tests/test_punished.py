"""Lost points: an action that lost points when the episode took it is passed over for the rest of the
episode while another choice remains (`agent.punished`), wherever the agent now stands; not on an
episode where most steps lost points (a cost on every step)."""

from __future__ import annotations

import json

import pytest

from crl.agent.app import start_run
from crl.agent.llm.base import Completion
from crl.agent.llm.scripted import ScriptedModel
from crl.agent.session import EpisodeSession, LoopConfig
from crl.memory.trajectory import Episode
from crl.tasks import registry
from crl.tasks.user_task import UserTask
from tests.test_posterior_policy import settings_for


class PenDesk(UserTask):
    """Put the pen away: the cup is its place (the win); the drawer and the bin each lose half a point,
    and the pen lies there until taken again (which earns the half point back), as in twc. The drawer
    stays open once used, so the agent never stands in the same situation twice."""

    name = "desk/pen"
    max_steps = 4
    step_cost = 0.0

    def reset(self, seed):
        self.where, self.drawer_open = "hand", False
        return self.observe(self.text(), goal="Put the pen where it belongs.", actions=self.actions())

    def text(self) -> str:
        drawer = "an open drawer" if self.drawer_open else "a closed drawer"
        pen = "You hold a pen." if self.where == "hand" else f"The pen lies in the {self.where}."
        return f"You see {drawer}, a bin and a cup. {pen}"

    def actions(self) -> list[str]:
        places = ["put pen in drawer", "put pen in bin", "put pen in cup"]
        return (places if self.where == "hand" else ["take pen"]) + ["look"]

    def step(self, action):
        reward = -self.step_cost
        if action == "put pen in cup" and self.where == "hand":
            return self.finish("The pen is in its cup.", success=True)
        if action.startswith("put pen in ") and self.where == "hand":
            self.where, reward = action.removeprefix("put pen in "), reward - 0.5
            self.drawer_open = self.drawer_open or self.where == "drawer"
        elif action == "take pen" and self.where != "hand":
            self.where, reward = "hand", reward + 0.5
        return self.proceed(self.text(), reward=reward, actions=self.actions())


class CostlyDesk(PenDesk):
    """The same desk, where every step also costs a point."""

    name = "desk/costly"
    step_cost = 1.0


DRAWER_LOVER = {"put pen in drawer": 0.0, "take pen": -0.1, "put pen in bin": -0.2, "put pen in cup": -0.3, "look": -1}


@pytest.fixture
def pen_desk(monkeypatch):
    for task in (PenDesk, CostlyDesk):
        monkeypatch.setitem(registry._TASKS, task.name, task.spec())
    return ScriptedModel(lambda messages: json.dumps(DRAWER_LOVER))


def test_a_put_that_lost_points_is_not_made_again_after_the_pen_is_taken_back(crl_home, pen_desk):
    """Without the rule, the drawer lover puts the pen in the drawer, takes it, and (the drawer now
    open: a new situation) puts it in the drawer again, running out of steps; with it, the second try
    goes to the bin, the third to the cup."""
    plain = start_run(settings_for(crl_home, punished=False), PenDesk.name, 1, model=pen_desk).episodes[0]
    assert [s.action for s in plain.steps][:3] == ["put pen in drawer", "take pen", "put pen in drawer"]
    assert not plain.success

    settings = settings_for(crl_home, punished=True, max_steps=6)
    episode = start_run(settings, PenDesk.name, 1, model=pen_desk).episodes[0]
    actions = [s.action for s in episode.steps]
    assert actions == ["put pen in drawer", "take pen", "put pen in bin", "take pen", "put pen in cup"]
    assert episode.success
    second_put = episode.steps[2].extra.policy
    assert second_put.posterior["punished"] == ["put pen in drawer"] and second_put.decided_by == "repeat-avoidance"
    assert "lost points when taken earlier in this episode: put pen in drawer" in second_put.reason

    from rich.console import Console

    from crl.agent.explain import render_explanation

    console = Console(record=True, width=200)
    render_explanation(console, episode, only_step=2)
    assert "lost points earlier this episode" in console.export_text()


def _session(task: type[PenDesk], config: LoopConfig | None = None) -> EpisodeSession:
    episode = Episode(episode_id="pen-0000", run_id="pen", task=task.name, seed=0, goal="")
    return EpisodeSession(task(), episode, config or LoopConfig(max_steps=9, react=False), lambda t: 1, lambda m: 1)


def _force(session: EpisodeSession, action: str) -> None:
    session.apply(Completion(text=f" {action}"), choose=lambda _: (action, "memory", "forced"))


def test_only_listed_actions_count_and_a_cost_on_every_step_is_no_lesson(pen_desk):
    session = _session(PenDesk)
    _force(session, "put pen in drawer")
    assert session.punished() == set()  # not listed while the pen lies in the drawer
    _force(session, "take pen")
    assert session.punished() == {"put pen in drawer"} and "put pen in drawer" in session.tried_here()

    costly = _session(CostlyDesk)
    _force(costly, "look")
    _force(costly, "put pen in drawer")
    _force(costly, "take pen")
    assert costly.punished() == set()  # every step lost points: a loss says nothing about the action


@pytest.mark.parametrize(
    "config", [LoopConfig(max_steps=9, punished=False), LoopConfig(max_steps=9, loop_breaker=False)]
)
def test_the_rule_is_off_without_the_loop_breaker_or_the_setting(pen_desk, config):
    session = _session(PenDesk, config)
    _force(session, "put pen in drawer")
    _force(session, "take pen")
    assert session.punished() == set()


class TwoThings(UserTask):
    """twc in small: a pen (its place: the cup) and a book (the shelf) lie on the floor. Taking one
    from anywhere but its place earns a quarter point, putting it in its place another, anywhere else
    loses one; taking it back from its place loses the put's."""

    name = "desk/two"
    max_steps = 9
    repeat_undoes_reward = True
    PLACES = {"pen": "cup", "book": "shelf"}

    def reset(self, seed):
        self.at = {"pen": "floor", "book": "floor"}
        return self.observe("A pen and a book on the floor; a cup, a shelf.", goal="Tidy up.", actions=self.actions())

    def actions(self) -> list[str]:
        held = [t for t, where in self.at.items() if where == "hand"]
        return [f"put {t} in {p}" for t in held for p in ("cup", "shelf")] + [
            f"take {t}" for t, where in self.at.items() if where != "hand"
        ]

    def step(self, action):
        verb, thing, *rest = action.split()
        if verb == "take":
            reward = -0.25 if self.at[thing] == self.PLACES[thing] else 0.25
            self.at[thing] = "hand"
        else:
            self.at[thing] = rest[-1]
            reward = 0.25 if rest[-1] == self.PLACES[thing] else -0.25
        text = "; ".join(f"the {t}: {where}" for t, where in self.at.items())
        return self.proceed(text, reward=reward, actions=self.actions())


def test_a_loss_gives_back_the_held_reward_of_the_action_on_the_same_thing(monkeypatch):
    """The pen's wrong put lost the point its take earned; the book's points since keep the return
    up, yet taking the pen again (from the wrong place: it earns) must stay open, and taking the
    book back out of its place (it would lose the put's point) must not."""
    monkeypatch.setitem(registry._TASKS, TwoThings.name, TwoThings.spec())
    episode = Episode(episode_id="two-0000", run_id="two", task=TwoThings.name, seed=0, goal="")
    session = EpisodeSession(TwoThings(), episode, LoopConfig(max_steps=9, react=False), lambda t: 1, lambda m: 1)
    for action in ("take pen", "put pen in shelf", "take book", "put book in shelf"):
        _force(session, action)
    assert [s.reward for s in episode.steps] == [0.25, -0.25, 0.25, 0.25] and episode.total_return == 0.5
    assert session.held_rewards() == {"take book", "put book in shelf"}
    assert "take pen" not in session.tried_here() and "take book" in session.tried_here()
