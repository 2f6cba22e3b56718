"""`Step.extra` is a typed record: old episode logs load unchanged, unknown keys survive, and
the logged shape is stable (the episode log and the bank store the same form)."""

from __future__ import annotations

import json

import pytest

from crl.memory.records import TrajectoryStep
from crl.memory.storage.episode_log import EpisodeLog, read_episodes
from crl.memory.trajectory import Episode, LoopBreak, MemoryOffer, PolicyDecision, Step, StepExtra
from crl.prompts.report import PromptReport

# A step line as the agent wrote it before `StepExtra` existed (extras a plain dict), with a key
# no version of this code writes ("retrieval_ms") that must not be lost.
OLD_STEP_LINE = (
    '{"event": "step", "episode_id": "20261201-101500-ab12-0000", "index": 1, "observation": "You are in the hall.", '
    '"action": "take brass key", "raw_output": "Action: take brass key", "thought": "", '
    '"admissible_actions": ["go north", "take brass key"], "valid": true, "reward": 0.0, "done": false, "info": {}, '
    '"prompt_tokens": 212, "completion_tokens": 5, "latency_s": 0.2, "decided_by": "loop-breaker", '
    '"extra": {"match": "exact", "raw_action": "look", '
    '"prompt": {"tokens": 212, "budget": 1024, "memory_keys": ["ep:keyroom:r-0001"], "dropped": [], "shortened": [], '
    '"observation_truncated": false, "history_dropped": 0, "messages": [{"role": "user", "content": "Goal: x"}]}, '
    '"memory": {"memories": [{"id": "ep:keyroom:r-0001", "kind": "episode", "score": 0.9, "breakdown": {}, '
    '"reason": "top", "slot": "success"}], "action_values": {"take brass key": {"value": 0.8, "hint": "h"}}, '
    '"explored": null, "baseline": 0.5}, '
    '"policy": {"decided_by": "llm", "reason": "no confident value", "model_action": "look"}, '
    '"loop_break": {"replaced": "look"}, "repeat": 2, "retrieval_ms": 3.5}, '
    '"time": 1764583000.0}'
)


def old_step() -> Step:
    return Step.from_dict(json.loads(OLD_STEP_LINE))


def test_an_old_log_line_loads_into_typed_fields():
    extra = old_step().extra
    assert extra.match == "exact" and extra.raw_action == "look" and extra.repeat == 2
    assert extra.prompt.tokens == 212 and extra.prompt.memory_keys == ["ep:keyroom:r-0001"]
    assert extra.prompt.messages == [{"role": "user", "content": "Goal: x"}]
    assert extra.memory.memories[0]["slot"] == "success" and extra.memory.baseline == 0.5
    assert extra.policy == PolicyDecision("llm", "no confident value", "look")
    assert extra.loop_break == LoopBreak("look") and extra.feedback is None
    assert extra.unknown == {"retrieval_ms": 3.5}


def test_an_old_log_line_is_written_back_unchanged():
    line = json.loads(OLD_STEP_LINE)
    del line["event"], line["episode_id"]
    assert old_step().to_dict() == line
    assert list(old_step().to_dict()["extra"]) == list(line["extra"])  # same key order too


def test_unknown_keys_inside_a_record_are_kept():
    extra = StepExtra.from_dict(
        {"prompt": {"tokens": 3, "budget": 9, "cache": "hit"}, "memory": {"memories": [], "query_ms": 2}}
    )
    assert extra.prompt.unknown == {"cache": "hit"} and extra.memory.unknown == {"query_ms": 2}
    assert extra.to_dict()["prompt"]["cache"] == "hit" and extra.to_dict()["memory"]["query_ms"] == 2


def test_the_logged_shape_holds_only_what_is_set():
    assert StepExtra().to_dict() == {}
    assert Step(0, "A hall.", "look").to_dict()["extra"] == {}
    extra = StepExtra(
        match="none",
        raw_action="",
        prompt=PromptReport(tokens=5, budget=10),
        memory=MemoryOffer(),
        policy=PolicyDecision("memory", "best value"),
        loop_break=LoopBreak("look"),
        feedback="No action found.",
        repeat=1,
    )
    assert list(extra.to_dict()) == [
        "match",
        "raw_action",
        "prompt",
        "memory",
        "policy",
        "loop_break",
        "feedback",
        "repeat",
    ]
    assert extra.to_dict()["policy"] == {"decided_by": "memory", "reason": "best value", "model_action": None}
    assert extra.to_dict()["memory"] == {"memories": [], "action_values": {}, "explored": None, "baseline": None}
    assert "messages" not in extra.to_dict()["prompt"]
    assert StepExtra.from_dict(extra.to_dict()) == extra


def test_to_dict_is_a_copy():
    step = old_step()
    logged = step.to_dict()
    logged["extra"]["prompt"]["memory_keys"].append("changed")
    assert step.extra.prompt.memory_keys == ["ep:keyroom:r-0001"]


def test_a_dict_given_to_step_is_read_and_anything_else_refused():
    step = Step(0, "A hall.", "look", extra={"feedback": "No action found.", "repeat": 1})
    assert isinstance(step.extra, StepExtra) and step.extra.feedback == "No action found."
    with pytest.raises(TypeError, match="StepExtra or a dict"):
        Step(0, "A hall.", "look", extra=["feedback"])


def test_the_bank_stores_the_same_shape_as_the_log():
    step = old_step()
    stored = TrajectoryStep.model_validate(step.to_dict())
    assert isinstance(stored.extra, StepExtra) and stored.extra == step.extra
    assert stored.model_dump(mode="json")["extra"] == step.to_dict()["extra"]
    assert Step.from_dict(stored.model_dump()).extra == step.extra


def test_old_and_new_lines_read_back_from_an_episode_log(tmp_path):
    path = tmp_path / "episodes.jsonl"
    episode = Episode(episode_id="e-0000", run_id="e", task="keyroom/key", seed=0, goal="Find the key.")
    with EpisodeLog(path) as log:
        log.start(episode)
        log.step(episode.episode_id, Step(0, "A hall.", "look", extra=StepExtra(match="exact", raw_action="look")))
    with path.open("a") as f:
        f.write(OLD_STEP_LINE.replace("20261201-101500-ab12-0000", "e-0000") + "\n")
    (read,) = read_episodes(path)
    assert [s.extra.match for s in read.steps] == ["exact", "exact"]
    assert read.steps[1].extra.loop_break.replaced == "look" and read.steps[1].extra.unknown == {"retrieval_ms": 3.5}
