"""Candidate sets where a task lists no actions: the builder, and the runner scoring over them."""

from __future__ import annotations

import json

import pytest

from crl.agent.candidates import DEFAULT_CAP, GENERIC_ACTIONS, ListsValidActions, build_candidates
from crl.agent.config import load_settings
from crl.agent.llm.scripted import ScriptedModel
from crl.agent.posterior import PosteriorConfig, PosteriorPolicy
from crl.agent.runner import EpisodePlan, Runner
from crl.agent.session import LoopConfig
from crl.memory.retrieval.config import RetrievalConfig
from crl.memory.retrieval.retriever import ContextPack
from crl.memory.storage.episode_log import EpisodeLog
from crl.tasks.base import Observation, StepOutcome
from tests.retrieval_fixtures import step_record

HALL_ACTIONS = [
    "connect air to drawing",
    "connect drawing to air",
    "eat drawing",
    "focus on drawing",
    "look around",
    "look at drawing",
    "open door to kitchen",
    "open door to workshop",
]


def test_the_reply_maps_onto_the_valid_action_it_names_and_its_nearest_neighbours():
    s = build_candidates(HALL_ACTIONS, "Open the door to the Kitchen.", cap=4)
    assert s.actions[0] == "open door to kitchen" and s.sources["open door to kitchen"] == ["reply"]
    assert s.reply_matched and len(s.actions) == 4 and s.valid == len(HALL_ACTIONS)
    assert s.sources["look around"] == ["generic"]
    assert "open door to workshop" in s.actions  # nearest by shared words
    near = build_candidates(HALL_ACTIONS, "The agent opens the door to the kitchen", cap=3)
    assert near.actions[:2] == ["look around", "open door to kitchen"] and not near.reply_matched
    assert near.sources["open door to kitchen"] == ["nearest"]


def test_memory_actions_come_in_when_valid_now_and_are_dropped_when_not():
    s = build_candidates(HALL_ACTIONS, "look around", memory=["go to kitchen", "Open door to kitchen", "eat drawing"])
    assert "go to kitchen" not in s.actions
    assert s.sources["open door to kitchen"] == ["memory"] and s.sources["eat drawing"] == ["memory"]
    assert s.actions[:3] == ["look around", "open door to kitchen", "eat drawing"]
    assert s.sources["look around"] == ["reply", "generic"]
    many = build_candidates(HALL_ACTIONS, None, memory=HALL_ACTIONS, cap=6)
    assert sum("memory" in v for v in many.sources.values()) == 2  # a third of the cap


def test_the_cap_holds_and_no_action_appears_twice():
    valid = [f"look at thing {i}" for i in range(50)] + ["look around"]
    s = build_candidates(valid, "look at thing 7", memory=["look at thing 7", "look around"], cap=5)
    assert len(s.actions) == 5 == len(set(s.actions))
    assert s.sources["look at thing 7"] == ["reply", "memory"]
    assert s.sources["look around"] == ["memory", "generic"]
    assert build_candidates(valid, "look", cap=DEFAULT_CAP).actions.__len__() == DEFAULT_CAP
    with pytest.raises(ValueError, match="at least 1"):
        build_candidates(valid, "look", cap=0)


def test_tried_actions_stay_candidates_but_go_last_and_are_cut_first():
    s = build_candidates(HALL_ACTIONS, "open door to kitchen", tried={"open door to kitchen"}, cap=len(HALL_ACTIONS))
    assert s.actions[-1] == "open door to kitchen" and s.sources["open door to kitchen"] == ["reply"]
    cut = build_candidates(HALL_ACTIONS, "open door to kitchen", tried={"open door to kitchen"}, cap=3)
    assert "open door to kitchen" not in cut.actions and len(cut.actions) == 3


def test_an_empty_or_garbage_reply_still_gives_a_varied_valid_set():
    for reply in (None, "", "???", "You are in the pantry, thinking about lunch"):
        s = build_candidates(HALL_ACTIONS, reply, memory=["eat drawing"], cap=5)
        assert len(s.actions) == 5 and set(s.actions) <= set(HALL_ACTIONS)
        assert "eat drawing" in s.actions and "look around" in s.actions
        assert sum(a.startswith("connect") for a in s.actions) <= 3
    assert build_candidates([], "look around").actions == []


def test_an_empty_reply_offers_one_action_per_verb_in_turn_and_never_a_refused_one():
    valid = [*HALL_ACTIONS, "reset task", "wait", "wait1"]
    s = build_candidates(valid, "", cap=7)
    verbs = [a.split()[0] for a in s.actions if s.sources[a] == ["nearest"]]
    assert len(s.actions) == 7 and "reset task" not in s.actions and "focus on drawing" not in s.actions
    assert sorted(verbs) == ["connect", "eat", "look", "open", "wait", "wait1"]  # one each: no second connect
    assert "reset task" not in build_candidates(valid, "reset task", cap=len(valid)).actions
    linking = build_candidates(valid, "To", cap=7)  # "to" alone is no similarity
    assert linking.actions == s.actions


def test_focus_comes_in_by_nearness_only_when_the_reply_asks_to_focus():
    prose = build_candidates(HALL_ACTIONS, "the agent will focus on the drawing", cap=len(HALL_ACTIONS))
    assert "focus on drawing" not in prose.actions and "look at drawing" in prose.actions
    asked = build_candidates(HALL_ACTIONS, "focus on the drawings", cap=3)
    assert "focus on drawing" in asked.actions and asked.sources["focus on drawing"] == ["nearest"]
    exact = build_candidates(HALL_ACTIONS, "focus on drawing", cap=3)
    assert exact.sources["focus on drawing"] == ["reply"]
    assert build_candidates(HALL_ACTIONS, "x", memory=["focus on drawing"]).sources["focus on drawing"] == ["memory"]


def test_the_cap_setting_defaults_to_the_builders_cap():
    assert load_settings({}).agent.posterior.candidates == DEFAULT_CAP
    assert "look around" in GENERIC_ACTIONS


class Corridor:
    """A three-room game whose observations list no actions; `valid_actions()` lists them.
    Open the kitchen door, go in, focus on the lamp: success. Focusing on anything else fails."""

    name = "corridor/key"
    ROOMS = {
        "hall": HALL_ACTIONS,
        "hall, door open": [a for a in HALL_ACTIONS if a != "open door to kitchen"] + ["go to kitchen"],
        "kitchen": ["focus on lamp", "go to hallway", "look around", "look at lamp", "pick up lamp"],
    }

    def __init__(self):
        self.room = "hall"
        self.steps: list[tuple[str, list[str]]] = []

    def reset(self, seed: int) -> Observation:
        self.room, self.steps = "hall", []
        return self._observe("You are in the hall.")

    def valid_actions(self) -> list[str]:
        return list(self.ROOMS[self.room])

    def step(self, action: str) -> StepOutcome:
        self.steps.append((action, self.valid_actions()))
        if action not in self.valid_actions():
            return StepOutcome(self._observe("No known action matches that input."), 0.0, False, {"invalid": True})
        if action.startswith("focus on"):
            won = action == "focus on lamp"
            return StepOutcome(self._observe("You focus."), float(won), True, {"success": won})
        self.room = {"open door to kitchen": "hall, door open", "go to kitchen": "kitchen"}.get(action, self.room)
        return StepOutcome(self._observe(f"You {action}."), 0.0, False, {"success": False})

    def _observe(self, text: str) -> Observation:
        return Observation(f"{text} This room is the {self.room}.", "Focus on the lamp.", admissible_actions=None)

    def close(self) -> None:
        pass


class StoredSteps:
    """A retriever stand-in: every query gets the same nearest stored steps."""

    def __init__(self, neighbours):
        self.config = RetrievalConfig()
        self.neighbours = neighbours
        self.queries = []

    def retrieve(self, queries):
        self.queries.extend(queries)
        return [ContextPack(q.observation, neighbours=list(self.neighbours)) for q in queries]


def play(tmp_path, script: list[str], advisor=None, max_steps: int = 4, cap: int = DEFAULT_CAP):
    env = Corridor()
    model = ScriptedModel(script)
    with EpisodeLog(tmp_path / "log.jsonl") as log:
        runner = Runner(
            model,
            lambda: env,
            log,
            LoopConfig(max_steps=max_steps, react=False),
            run_id="r",
            task="corridor/key",
            advisor=advisor,
            posterior=PosteriorPolicy(PosteriorConfig()),
            candidate_cap=cap,
        )
        stats = runner.run([EpisodePlan("e0", 0)])
    return stats.episodes[0], env, model


def test_the_posterior_scores_a_candidate_set_where_the_task_lists_no_actions(tmp_path):
    assert isinstance(Corridor(), ListsValidActions)
    script = [
        " The agent opens the door to the kitchen",
        "Action: open door to kitchen",
        " go to the kitchen",
        "Action: go to kitchen",
        " ???",
        json.dumps({"focus on lamp": 0.0, "look at lamp": -0.5}),
        " focus on the lamps",
        "Action: focus on lamp",
    ]
    episode, env, model = play(tmp_path, script, cap=5)
    assert episode.success and [st.action for st in episode.steps] == [
        "open door to kitchen",
        "go to kitchen",
        "look at lamp",
        "focus on lamp",
    ]
    assert all(st.valid for st in episode.steps) and all(a in valid for a, valid in env.steps)
    assert [c.config.max_new_tokens > 0 for c in model.calls] == [True, False] * 4  # generate, then score
    first, second, third, fourth = (st.extra.policy.posterior for st in episode.steps)
    assert first["candidates"]["sources"]["open door to kitchen"] == ["nearest"]
    assert first["candidates"]["reply"] == "The agent opens the door to the kitchen"
    assert second["candidates"]["sources"]["go to kitchen"] == ["reply"]
    assert "focus on lamp" not in third["actions"] and not third["candidates"]["reply_matched"]  # "???" asks no focus
    assert fourth["candidates"]["sources"]["focus on lamp"] == ["nearest"]
    for st in episode.steps:
        scored = st.extra.policy.posterior["actions"]
        assert list(scored) == list(st.extra.policy.posterior["candidates"]["sources"]) and len(scored) <= 5
    assert episode.steps[0].raw_output == "Action: The agent opens the door to the kitchen"
    assert episode.steps[0].decided_by == "llm" and episode.steps[0].extra.policy.model_action is not None


def test_memory_adds_its_valid_actions_and_steers_the_posterior_over_them(tmp_path):
    from crl.agent.advisor import MemoryAdvisor

    hall = "You are in the hall. This room is the hall."
    won = step_record("won", 0, "open door to kitchen", "success", length=3, family="corridor", observation=hall)
    lost = step_record("lost", 0, "look around", "failure", length=3, family="corridor", observation=hall)
    gone = step_record("gone", 0, "go to kitchen", "success", length=2, family="corridor", observation=hall)
    retriever = StoredSteps([(won, 1.0), (lost, 1.0), (gone, 1.0)])
    advisor = MemoryAdvisor(None, retriever, mode="off", policy="posterior", learn=False)
    script = [" look around", json.dumps({"look around": 0.0, "open door to kitchen": -1.0})]
    episode, _, _ = play(tmp_path, script, advisor=advisor, max_steps=1)
    step = episode.steps[0]
    decision = step.extra.policy.posterior
    assert retriever.queries[0].admissible == HALL_ACTIONS  # the valid actions stand in for the list
    assert decision["candidates"]["sources"]["open door to kitchen"] == ["memory"]
    assert "go to kitchen" not in decision["actions"]  # memory's action not valid in the hall
    assert step.action == "open door to kitchen" and step.decided_by == "memory" and step.valid
    assert decision["model_best"] == "look around" and decision["memory_changed_argmax"]
