"""Directed exploration: open a closed place before another use of a held object memory saw fail."""

from __future__ import annotations

import json

from crl.agent.config import load_settings
from crl.agent.directed_exploration import explore_first, explored_openings, opened_places
from crl.agent.posterior import PosteriorConfig, decide
from crl.memory.retrieval.episodic_control import MemoryAdvantage
from crl.memory.trajectory import Step

PUTS = ["put sock in table", "put sock in chair"]


def seen(action: str, n: int = 2, successes: int = 0) -> MemoryAdvantage:
    return MemoryAdvantage(action, q=-0.5, baseline=0.4, support=1.0, n=n, successes=successes)


def test_every_use_seen_to_fail_opens_a_closed_place_first():
    actions = ["look", *PUTS, "open drawer", "open table"]
    memory = {a: seen(a) for a in PUTS}
    # "table" is a listed target (already open), so only the drawer is offered
    assert explore_first(actions, memory, opened=set()) == ["open drawer"]
    assert explore_first(actions, memory, opened=set(), tried={"open drawer": 1}) == []


def test_a_success_or_no_evidence_leaves_the_choice_to_the_posterior():
    actions = [*PUTS, "open drawer"]
    assert explore_first(actions, {"put sock in table": seen("put sock in table", successes=1)}, set()) == []
    assert explore_first(actions, {a: seen(a, n=0) for a in PUTS}, set()) == []
    assert explore_first(actions, {}, set()) == []
    # doors opened toward a direction are uses of the door, never openings of a closed place
    doors = ["open door to north", "open door to south"]
    assert explore_first(doors, {a: seen(a) for a in doors}, set()) == []
    # one listed use is no choice of where the object goes
    assert (
        explore_first(["put sock in table", "open drawer"], {"put sock in table": seen("put sock in table")}, set())
        == []
    )


def test_a_place_exploration_opened_is_used_before_opening_another():
    actions = [*PUTS, "put sock in drawer", "open box"]
    memory = {a: seen(a) for a in PUTS}
    assert opened_places(["take sock", "Open the drawer."]) == {"drawer"}
    assert explore_first(actions, memory, opened={"drawer"}) == ["put sock in drawer"]
    # the same use is never offered twice in an episode, whatever the situation
    assert explore_first(actions, memory, opened={"drawer"}, taken={"put sock in drawer"}) == ["open box"]
    # once opened, the drawer comes first even where memory holds nothing on the new state
    assert explore_first(actions, {}, opened={"drawer"}) == ["put sock in drawer"]
    assert explore_first(actions, {"put sock in table": seen("put sock in table", successes=1)}, {"drawer"}) == []
    # the new place's own success evidence does not turn the rule off
    drawer = {"put sock in drawer": seen("put sock in drawer", successes=1)}
    assert explore_first(actions, memory | drawer, opened={"drawer"}) == ["put sock in drawer"]
    # a drawer the model opened on its own is a listed place like the table: the box is opened first
    assert explore_first(actions, memory, opened=set()) == ["open box"]


def test_an_object_memory_knows_nothing_of_does_not_hide_another_held_one():
    hats = ["put hat in table", "put hat in chair"]
    actions = [*hats, *PUTS, "open drawer"]
    assert explore_first(actions, {a: seen(a) for a in PUTS}, set()) == ["open drawer"]


def test_the_episode_refuting_memorys_success_opens_a_closed_place():
    """twc's fresh test seed 20193: memory's analogues said "success 5 of 15" for the hat rack, the game
    took the point back, and the boots belonged in the closed shoe cabinet."""
    boots = ["put boots in hat rack", "put boots in coat hanger", "put boots in key holder"]
    actions = [*boots, "open shoe cabinet"]
    memory = {a: seen(a) for a in boots} | {boots[0]: seen(boots[0], n=15, successes=5)}
    assert explore_first(actions, memory, set()) == []
    assert explore_first(actions, memory, set(), refuted={boots[0]}) == ["open shoe cabinet"]
    # memory's own success for another listed place still leaves the choice to the posterior
    hanger = {boots[1]: seen(boots[1], successes=1)}
    assert explore_first(actions, memory | hanger, set(), refuted={boots[0]}) == []


def test_the_episodes_refutation_alone_opens_only_when_few_open_places_are_left():
    puts = [f"put sock in {p}" for p in ("table", "chair", "bed", "shelf", "sofa", "desk")]
    actions = [*puts, "open drawer"]
    # memory knows nothing of these places; one refuted, five untried for one closed drawer: not yet
    assert explore_first(actions, {}, set(), refuted={puts[0]}) == []
    # two untried per closed place is the bound
    assert explore_first(actions, {}, set(), refuted=set(puts[:3])) == []
    assert explore_first(actions, {}, set(), refuted=set(puts[:4])) == ["open drawer"]
    # where memory saw listed places fail too, the bound does not apply
    assert explore_first(actions, {puts[5]: seen(puts[5])}, set(), refuted={puts[0]}) == ["open drawer"]
    # where memory alone already asks (every listed place it knows failed), a refutation adds no bound
    memory = {puts[0]: seen(puts[0])}
    assert explore_first(actions, memory, set()) == ["open drawer"]
    assert explore_first(actions, memory, set(), refuted={puts[0]}) == ["open drawer"]
    # a refutation is no evidence about an object it did not use
    assert explore_first(["put hat in table", "put hat in chair", "open drawer"], {}, set(), refuted={puts[0]}) == []


def test_a_place_counts_as_explored_only_where_exploration_decided_the_step():
    def step(i: int, action: str, decided_by: str) -> Step:
        return Step(i, "room", action, decided_by=decided_by)

    steps = [step(0, "open box", "llm"), step(1, "open drawer", "exploration"), step(2, "open cupboard", "memory")]
    assert explored_openings(steps) == {"drawer"}


def test_decide_chooses_among_the_explored_actions_and_says_so():
    probs = {"put sock in table": 0.9, "put sock in chair": 0.08, "open drawer": 0.02}
    memory = {a: seen(a) for a in PUTS}
    d = decide(probs, memory, PosteriorConfig(explore_enabling=True), first=["open drawer"])
    assert d.chosen == "open drawer" and d.decided_by == "exploration" and d.explored == ["open drawer"]
    assert "so first: open drawer" in d.reason
    record = d.to_dict()
    assert record["explored"] == ["open drawer"] and record["explore_enabling"] is True
    # once the explored action was tried here, the posterior chooses as before
    again = decide(probs, memory, PosteriorConfig(), avoid={"open drawer"}, first=["open drawer"])
    assert again.chosen == "put sock in table" and again.explored == []


def _settings(home, explore: bool):
    agent = {
        "policy": "posterior",
        "parallel": 1,
        "max_steps": 4,
        "posterior": {"explore_enabling": explore},
    }
    return load_settings({"home": str(home), "agent": agent, "reflect": {"enabled": False}})


def _sock_task(name: str, places: list[str], wrong_put: float):
    """A bedroom whose sock belongs in a closed drawer; a put anywhere else earns `wrong_put`."""
    from crl.tasks.user_task import UserTask

    class Sock(UserTask):
        max_steps = 5

        def reset(self, seed):
            self.place, self.opened = "floor", False
            return self.observe(self.room(), goal="Put the sock where it belongs.", actions=self.actions())

        def room(self) -> str:
            where = "You hold a sock." if self.place == "hand" else f"A sock lies on the {self.place}."
            furniture = ", ".join(f"a {p}" for p in places)
            return f"A bedroom with {furniture} and a {'open' if self.opened else 'closed'} drawer. {where}"

        def actions(self) -> list[str]:
            if self.place != "hand":
                return ["take sock", "look", *([] if self.opened else ["open drawer"])]
            return [f"put sock in {p}" for p in places] + ["put sock in drawer" if self.opened else "open drawer"]

        def step(self, action):
            if action == "put sock in drawer":
                return self.finish("The sock is away.", success=True, reward=1.0)
            reward = 0.0
            if action.startswith("put sock in "):
                self.place, reward = action.removeprefix("put sock in "), wrong_put
            self.place = "hand" if action == "take sock" else self.place
            self.opened = self.opened or action == "open drawer"
            return self.proceed(self.room(), actions=self.actions(), reward=reward)

    Sock.name = name
    return Sock


def test_the_loop_opens_the_closed_drawer_once_memory_saw_the_open_places_fail(crl_home, monkeypatch):
    """A sock belongs in a closed drawer; the model prefers the table and the chair, and almost
    never opens anything. After a stored play that tried both and lost, directed exploration opens
    the drawer and puts the sock there; without it the replay loses again."""
    from crl.agent.app import start_run
    from crl.agent.llm.scripted import ScriptedModel
    from crl.tasks import registry

    Sock = _sock_task("tidy/sock", ["table", "chair"], wrong_put=0.0)
    monkeypatch.setitem(registry._TASKS, Sock.name, Sock.spec())
    scores = {"take sock": 0.0, "put sock in table": -0.5, "put sock in chair": -0.7, "look": -6.0}
    model = ScriptedModel(lambda messages: json.dumps(scores | {"open drawer": -8.0, "put sock in drawer": -9.0}))
    lost = start_run(_settings(crl_home, explore=False), "tidy/sock", 1, model=model).episodes[0]
    assert not lost.success and {st.action for st in lost.steps} >= set(PUTS)

    replay = start_run(_settings(crl_home, explore=False), "tidy/sock", 1, model=model, kind="eval").episodes[0]
    assert not replay.success

    explored = start_run(_settings(crl_home, explore=True), "tidy/sock", 1, model=model, kind="eval").episodes[0]
    assert explored.success
    assert [st.action for st in explored.steps] == ["take sock", "open drawer", "put sock in drawer"]
    assert [st.decided_by for st in explored.steps[1:]] == ["exploration", "exploration"]
    assert explored.steps[1].extra.policy.posterior["explored"] == ["open drawer"]

    from rich.console import Console

    from crl.agent.explain import render_explanation

    console = Console(record=True, width=200)
    render_explanation(console, explored)
    text = console.export_text()
    assert ", directed exploration)" in text and "explored first" in text and "decided by exploration" in text


def test_the_loop_opens_the_drawer_after_the_episode_itself_lost_points_on_a_put(crl_home, monkeypatch):
    """Memory holds nothing about where the sock goes (one stored episode that only looked around),
    so memory's failures cannot ask for exploration; the game's own lost point on the table does,
    with two open places left for one closed drawer. Without `agent.punished` the episode's loss
    is no evidence and the agent tries the open places until it runs out of steps."""
    from crl.agent.app import start_run
    from crl.agent.llm.scripted import ScriptedModel
    from crl.tasks import registry

    places = ["table", "chair", "bed"]

    Sock = _sock_task("tidy/sock-points", places, wrong_put=-1.0)
    monkeypatch.setitem(registry._TASKS, Sock.name, Sock.spec())
    looker = ScriptedModel(lambda messages: json.dumps({"look": 0.0, "take sock": -9.0, "open drawer": -9.0}))
    short = _settings(crl_home, explore=True)
    short.agent.max_steps = 1
    stored = start_run(short, Sock.name, 1, model=looker).episodes[0]
    assert not stored.success and {st.action for st in stored.steps} == {"look"}

    scores = {"take sock": 0.0, "look": -6.0, "open drawer": -8.0, "put sock in drawer": -9.0}
    model = ScriptedModel(lambda m: json.dumps(scores | {f"put sock in {p}": -0.5 * i for i, p in enumerate(places)}))

    def play(punished: bool):
        settings = _settings(crl_home, explore=True)
        settings.agent.punished, settings.agent.max_steps = punished, 5
        return start_run(settings, Sock.name, 1, model=model, kind="eval").episodes[0]

    blind = play(punished=False)
    assert not blind.success and "open drawer" not in [st.action for st in blind.steps]
    explored = play(punished=True)
    assert explored.success
    assert [st.action for st in explored.steps] == [
        "take sock",
        "put sock in table",
        "take sock",
        "open drawer",
        "put sock in drawer",
    ]
    assert [st.decided_by for st in explored.steps[3:]] == ["exploration", "exploration"]
    assert "less what this episode lost points on), so first: open drawer" in explored.steps[3].extra.policy.reason
    assert explored.steps[3].extra.policy.posterior["punished"] == ["put sock in table"]
