"""Utility credit: arithmetic, the family baseline, and the reranker following what preceded success."""

from __future__ import annotations

import pytest

from crl.memory.retrieval.config import RetrievalConfig
from crl.memory.retrieval.credit import credit_episode, credit_target, family_success_rate
from crl.memory.retrieval.retriever import RetrievalQuery, Retriever
from crl.memory.tags import ema_update
from tests.retrieval_fixtures import GOAL, HALL, bank, episode, no_default_embedding  # noqa: F401


def test_credit_target_is_relative_to_the_family_rate():
    assert credit_target(True, 0.2) == pytest.approx(0.9)
    assert credit_target(True, 0.9) == pytest.approx(0.55)
    assert credit_target(False, 0.9) == pytest.approx(0.05)
    assert credit_target(False, 0.0) == pytest.approx(0.5)
    assert credit_target(True, 0.5) - 0.5 == pytest.approx(0.5 - credit_target(False, 0.5))


def test_family_success_rate_comes_from_the_bank(bank):
    assert family_success_rate(bank, "keyroom") == 0.5  # nothing stored: the prior
    for i, ok in enumerate([True, False, False, False]):
        bank.ingest_episode(episode("r1", i, ["look"], ok))
    assert family_success_rate(bank, "keyroom") == pytest.approx(2 / 6)
    bank.quarantine("r1-0001")
    assert family_success_rate(bank, "keyroom") == pytest.approx(2 / 5)


def test_credit_counts_each_memory_once_per_episode_and_steps_the_value(bank):
    for i, ok in enumerate([True, False, False]):
        bank.ingest_episode(episode("r1", i, ["look", "take brass key"], ok))
    ids = ["ep:keyroom:r1-0000", "st:keyroom:r1-0001:1", "ep:keyroom:r1-0000"]
    before = {i: bank.get(i) for i in set(ids)}
    p = family_success_rate(bank, "keyroom")
    report = credit_episode(bank, True, "keyroom", ids)
    assert report.ids == ["ep:keyroom:r1-0000", "st:keyroom:r1-0001:1"]
    assert report.baseline == pytest.approx(p) and report.target == pytest.approx(credit_target(True, p))
    alpha = bank.config.value_alpha
    for rid, old in before.items():
        new = bank.get(rid)
        assert (new.use_count, new.use_successes) == (1, 1)
        assert new.utility == pytest.approx(2 / 3)
        assert new.value == pytest.approx(ema_update(old.value, report.target, alpha))
    assert credit_episode(bank, False, "keyroom", [], baseline=0.3).target == pytest.approx(0.35)
    with pytest.raises(ValueError):
        credit_episode(bank, True, "keyroom", ["not-an-id"])


def test_memories_that_keep_preceding_failure_sink_and_those_preceding_success_rise(bank):
    for i in range(2):
        bank.ingest_episode(episode("r1", i, ["take brass key"], True, [HALL]))
    retriever = Retriever(bank, RetrievalConfig(epsilon=0.0, k_success=1, mmr_lambda=1.0))
    query = RetrievalQuery("keyroom", "keyroom/key", GOAL, HALL, [], None)
    first = retriever.retrieve([query])[0].successes[0].id
    other = ({"ep:keyroom:r1-0000", "ep:keyroom:r1-0001"} - {first}).pop()
    for _ in range(3):
        credit_episode(bank, False, "keyroom", [first])
        credit_episode(bank, True, "keyroom", [other])
    pack = retriever.retrieve([query])[0]
    assert pack.successes[0].id == other
    assert pack.successes[0].breakdown["utility"] > 0
