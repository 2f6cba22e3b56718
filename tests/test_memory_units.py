"""Pure parts of the bank: ids, tags and value labels, eviction policy, journal, config."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from pydantic import ValidationError

from crl.memory.config import EvictionWeights, MemoryConfig, ValueWeights
from crl.memory.curation import keep_score, plan_eviction
from crl.memory.ingest import EpisodeTags, build_records, compute_tags, episode_as_of, step_texts
from crl.memory.records import (
    EpisodeRecord,
    episode_of_step,
    parse_record_id,
    record_from_dict,
    rule_record_id,
    state_text,
    step_record_id,
    utility_of,
)
from crl.memory.storage.journal import Journal, JournalEntry, JournalError
from crl.memory.storage.journal_state import JournalState
from crl.memory.tags import (
    ema_update,
    episode_skills,
    episode_value,
    novelties,
    outcome_of,
    reward_sparsity,
    step_skills,
    step_value,
)
from tests.chroma_server import make_episode


def test_record_ids_are_deterministic_and_parse_back():
    assert step_record_id("keyroom", "r1-0003", 4) == "st:keyroom:r1-0003:4"
    assert parse_record_id("st:keyroom:r1-0003:4") == ("step", "keyroom", "r1-0003:4")
    assert episode_of_step("st:keyroom:r1-0003:4") == "ep:keyroom:r1-0003"
    assert rule_record_id("keyroom", "x") == rule_record_id("keyroom", "x") != rule_record_id("all", "x")
    with pytest.raises(ValueError, match="not a memory record id"):
        parse_record_id("r1-0003")


def test_state_text_has_goal_history_and_observation():
    assert state_text("G", "O", []) == "Goal: G\nObservation: O"
    assert state_text("G", "O", ["a", "b"]) == "Goal: G\nRecent actions: a | b\nObservation: O"


def test_reward_sparsity_and_outcome():
    assert reward_sparsity([0, 0, 0, 1]) == 0.75
    assert reward_sparsity([]) == 1.0
    assert outcome_of(make_episode("r", 0, success=True)) == "success"
    assert outcome_of(make_episode("r", 0, success=False)) == "failure"
    assert outcome_of(make_episode("r", 0, success=False, finished=False)) == "unfinished"


def test_novelty_counts_the_bank_and_earlier_states_of_the_batch():
    e = np.array([[1.0, 0.0], [0.6, 0.8], [1.0, 0.0]], dtype=np.float32)
    got = novelties(e, [None, 0.5, None])
    assert got == pytest.approx([1.0, 0.4, 0.0])
    assert novelties(np.array([[0.0, 1.0]]), [-0.7]) == [1.0]  # clipped to [0, 1]


def test_skills_come_from_subgoals_first_reached():
    ep = make_episode("r", 0, success=True, n_steps=3)
    ep.steps[1].info = {"subgoals": {"key": True, "door": False}}
    ep.steps[2].info = {"subgoals": {"key": True, "door": True}}
    assert step_skills(ep.steps) == [[], ["key"], ["door"]]
    assert episode_skills(ep) == ["door", "key"]


def test_value_labels_follow_the_documented_formula():
    w = ValueWeights(success=0.5, reward=0.25, novelty=0.25)
    assert step_value(True, 1.0, 0.75, 0.2, w) == pytest.approx(0.5 + 0.25 * 0.75 + 0.25 * 0.2)
    assert step_value(False, 0.0, 0.75, 0.2, w) == pytest.approx(0.05)
    assert episode_value(True, True, 0.75, 0.4, w) == pytest.approx(0.5 + 0.1875 + 0.1)
    assert episode_value(False, False, 1.0, 0.0, w) == 0.0


def test_ema_update_arithmetic():
    assert ema_update(0.2, 1.0, 0.1) == pytest.approx(0.28)
    v = 0.2
    for _ in range(50):
        v = ema_update(v, 1.0, 0.1)
    assert v == pytest.approx(1 - 0.8 * 0.9**50)
    assert ema_update(0.7, 0.7, 0.5) == pytest.approx(0.7)
    assert utility_of(0, 0) == 0.5 and utility_of(3, 3) == 0.8


def test_records_of_an_episode_and_of_its_unfinished_prefix():
    ep = make_episode("r1", 2, success=True, n_steps=4)
    tags = compute_tags(ep, [1.0, 0.5, 0.5, 0.0], ValueWeights())
    episode, steps = build_records(ep, tags, history_steps=2, now=123.0)
    assert episode.id == "ep:keyroom:r1-0002" and [s.index for s in steps] == [0, 1, 2, 3]
    assert steps[3].history == ["go south", "take key"] and steps[3].text == step_texts(ep, 2)[3]
    assert episode.value == pytest.approx(tags.value) and episode.novelty == pytest.approx(0.5)
    partial = episode_as_of(ep, 2, finished=False)
    assert (len(partial.steps), partial.status, partial.success) == (2, "running", False)
    assert len(ep.steps) == 4  # the original is untouched
    rec, _ = build_records(partial, EpisodeTags([1.0, 0.5], [0.1, 0.1], 0.1), 2, now=1.0)
    assert rec.outcome == "unfinished"


def test_records_reject_extra_fields_nan_and_wrong_ids():
    ep = make_episode("r1", 0, success=True, n_steps=1)
    rec, _ = build_records(ep, EpisodeTags([1.0], [1.0], 1.0), 3, now=1.0)
    data = rec.model_dump(mode="json")
    assert record_from_dict(data) == rec
    with pytest.raises(ValidationError):
        EpisodeRecord.model_validate(data | {"extra": 1})
    with pytest.raises(ValidationError):
        EpisodeRecord.model_validate(data | {"value": float("nan")})
    with pytest.raises(ValidationError, match="does not match"):
        EpisodeRecord.model_validate(data | {"id": "ep:keyroom:other"})
    bad_step = dict(data, trajectory=[dict(data["trajectory"][0], surprise=True)])
    with pytest.raises(ValidationError):
        EpisodeRecord.model_validate(bad_step)


def _episode_record(
    i: int, tier: str = "regular", value: float = 0.5, uses: int = 0, age_days: float = 0.0
) -> EpisodeRecord:
    ep = make_episode("r", i, success=True, n_steps=1)
    rec, _ = build_records(ep, EpisodeTags([1.0], [1.0], value), 3, now=1.0)
    created = time.time() - age_days * 86400
    return rec.model_copy(update={"tier": tier, "use_count": uses, "created_at": created})


def test_keep_score_prefers_valuable_used_recent():
    w = EvictionWeights()
    assert keep_score(0.8, 0, 0.0, w, 30) > keep_score(0.2, 0, 0.0, w, 30)
    assert keep_score(0.5, 5, 0.0, w, 30) > keep_score(0.5, 0, 0.0, w, 30)
    assert keep_score(0.5, 0, 1.0, w, 30) > keep_score(0.5, 0, 90.0, w, 30)


def test_eviction_plan_respects_capacity_golden_and_quarantine():
    records = [
        _episode_record(0, tier="golden", value=0.0, age_days=400),
        _episode_record(1, value=0.1, age_days=100),
        _episode_record(2, value=0.9),
        _episode_record(3, value=0.7, uses=4),  # less valuable than r-0002 but often used
        _episode_record(4, tier="quarantine", value=0.0),
    ]
    plan = plan_eviction(records, capacity=2, now=time.time(), weights=EvictionWeights(), half_life_days=30)
    assert [c.id for c in plan] == ["ep:keyroom:r-0001", "ep:keyroom:r-0002"]
    assert plan_eviction(records, capacity=10, now=time.time(), weights=EvictionWeights(), half_life_days=30) == []
    golden_only = [_episode_record(i, tier="golden") for i in range(3)]
    assert plan_eviction(golden_only, capacity=1, now=time.time(), weights=EvictionWeights(), half_life_days=30) == []


def test_journal_appends_reads_and_cuts_a_torn_tail(tmp_path):
    path = tmp_path / "journal.jsonl"
    journal = Journal(path, fsync=False)
    first = journal.append([JournalEntry("tag", ["ep:a:1"], {"tags": ["x"]}, "me")])[0]
    with open(path, "ab") as f:
        f.write(b'{"v":1,"time":1,"op":"ta')  # a writer died mid-line
    entries, end = journal.read(0)
    assert [e.seq for e in entries] == [first.seq] and end < path.stat().st_size
    second = journal.append([JournalEntry("rm", ["ep:a:1"], {"reason": "x"}, "me")])[0]
    entries, _ = Journal(path).read(0)
    assert [e.op for e in entries] == ["tag", "rm"] and entries[1].seq == second.seq
    assert Journal(path).journal_id == journal.journal_id
    with pytest.raises(ValueError, match="unknown journal op"):
        journal.append([JournalEntry("explode", [], {}, "me")])


def test_journal_from_a_newer_crl_is_refused(tmp_path):
    path = tmp_path / "journal.jsonl"
    journal = Journal(path, fsync=False)
    with open(path, "a") as f:
        f.write(json.dumps({"v": 99, "time": 1.0, "actor": "x", "op": "tag", "ids": [], "payload": {}}) + "\n")
    with pytest.raises(JournalError, match="upgrade crl"):
        journal.read(0)


def test_rollback_cancels_later_entries_and_blocks_their_sync():
    state = JournalState()

    def ingest(rid: str, t: float, seq: int) -> JournalEntry:
        payload = {"episode_id": rid.split(":")[2], "family": "k", "n_steps": 1, "finished": True, "novelty": [1.0]}
        return JournalEntry("ingest", [rid], payload, "me", time=t, seq=seq)

    state.observe(ingest("ep:k:a", 10.0, 1))
    state.observe(JournalEntry("tag", ["ep:k:a"], {"tags": ["x"]}, "me", time=20.0, seq=2))
    state.observe(ingest("ep:k:b", 30.0, 3))
    state.observe(JournalEntry("rollback", [], {"as_of": 15.0}, "me", time=40.0, seq=4))
    assert [e.seq for e in state.entries] == [1]
    assert set(state.ingested) == {"ep:k:a"}
    assert state.may_sync("ep:k:a") and not state.may_sync("ep:k:b")
    state.observe(JournalEntry("rm", ["ep:k:a"], {}, "me", time=50.0, seq=5))
    assert not state.may_sync("ep:k:a")


def test_config_validates_url_and_namespace():
    assert MemoryConfig(url="").url is None and not MemoryConfig().server_mode
    assert MemoryConfig(url="http://127.0.0.1:8000").server_mode
    with pytest.raises(ValidationError, match="HOST:PORT"):
        MemoryConfig(url="127.0.0.1:8000")
    with pytest.raises(ValidationError, match="letters and digits"):
        MemoryConfig(namespace="my-bank")
    assert all(f.description for f in MemoryConfig.model_fields.values())
