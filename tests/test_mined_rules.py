"""Mined rules on a fixture keyroom bank: a known precondition, ordering and dead end are found with
their support, coincidences are not, storing is idempotent and keeps votes, and mined rules reach
the prompt like the reflector's own."""

from __future__ import annotations

import pytest

from crl.agent.advisor import MemoryAdvisor
from crl.memory.records import rule_record_id
from crl.memory.reflection import MiningConfig, mine_rules
from crl.memory.reflection.mined_rules import STALE_TAG
from crl.memory.retrieval.config import RetrievalConfig
from crl.memory.retrieval.retriever import RetrievalQuery, Retriever
from crl.prompts.agent_prompt import render_memory
from tests.retrieval_fixtures import episode, open_test_bank

GOAL = "Take the brass key, unlock and open the door, then take the treasure from the chest."
HALL, KITCHEN, VAULT, CELLAR = (
    f"You are in the {p}. Exits: east, west." for p in ("hall", "kitchen", "vault", "cellar")
)
NONE = {"key": False, "door": False, "chest": False}
KEY, DOOR, ALL = NONE | {"key": True}, NONE | {"key": True, "door": True}, dict.fromkeys(NONE, True)

# (observation, action, accepted, sub-goals after the step)
WIN = [
    (HALL, "go east", True, NONE),
    (KITCHEN, "unlock door with brass key", False, NONE),  # no key yet: the game refuses
    (KITCHEN, "take brass key", True, KEY),
    (KITCHEN, "unlock door with brass key", True, KEY),
    (KITCHEN, "open door", True, DOOR),
    (VAULT, "take treasure", True, ALL),
]
LOSS = [(HALL, "go west", True, NONE), (CELLAR, "look", True, NONE)]
# a pattern seen in two episodes only: 'drop clock' refused, then accepted after 'take clock'
CLOCK = [(CELLAR, "drop clock", False, NONE), (CELLAR, "take clock", True, NONE), (CELLAR, "drop clock", True, NONE)]

PRECONDITION = "'unlock door with brass key' fails unless 'take brass key' was done earlier."
KEY_THEN_DOOR = "'open door' succeeds only after 'take brass key'."
DOOR_THEN_CHEST = "'take treasure' succeeds only after 'open door'."
DEAD_END = "'go west' from the hall never led to success in keyroom."
COINCIDENCE = "'drop clock' fails unless 'take clock' was done earlier."


def store(bank, run: str, i: int, script, success: bool) -> str:
    """Ingest one episode playing `script`; returns its record id."""
    ep = episode(
        run,
        i,
        [a for _, a, _, _ in script],
        success,
        observations=[o for o, _, _, _ in script],
        task="keyroom/compound",
        goal=GOAL,
        valid=[ok for _, _, ok, _ in script],
    )
    for step, (_, _, ok, subgoals) in zip(ep.steps, script, strict=True):
        step.info = {"subgoals": dict(subgoals), "invalid": not ok}
    ep.subgoals = dict(script[-1][3])
    bank.ingest_episode(ep)
    return f"ep:keyroom:{ep.episode_id}"


@pytest.fixture
def bank(tmp_path):
    b = open_test_bank(tmp_path)
    for i in range(4):
        store(b, "r1", i, WIN, True)
    for i in range(6):
        store(b, "r2", i, LOSS + (CLOCK if i < 2 else []), False)
    yield b
    b.close()


def by_text(report):
    return {c.text: c for c in report.candidates}


def test_known_rules_are_found_with_their_support_and_coincidences_are_not(bank):
    report = mine_rules(bank, "keyroom", dry_run=True)
    found = by_text(report)
    assert report.episodes == 10
    assert {c.text for c in report.kept} == {PRECONDITION, KEY_THEN_DOOR, DOOR_THEN_CHEST, DEAD_END}
    pre = found[PRECONDITION]
    assert (pre.support, pre.counter, pre.confidence) == (4, 0, 1.0)
    assert pre.episodes == [f"ep:keyroom:r1-{i:04d}" for i in range(4)]
    assert (found[DEAD_END].support, found[DEAD_END].p_value) == (6, pytest.approx((6 / 10) ** 6))
    assert found[KEY_THEN_DOOR].support == 4
    clock = found[COINCIDENCE]
    assert not clock.kept and clock.confidence == 1.0 and clock.reason == "support 2 < 3"
    implied = found["'take treasure' succeeds only after 'take brass key'."]
    assert not implied.kept and "implied" in implied.reason
    reversed_order = found.get("'take brass key' succeeds only after 'open door'.")
    assert reversed_order is None  # never seen in that order: not even a candidate
    assert bank.rules("keyroom") == []  # a dry run writes nothing


def test_thresholds_are_configurable(bank):
    loose = mine_rules(bank, "keyroom", config=MiningConfig(min_support=2), dry_run=True)
    assert COINCIDENCE in {c.text for c in loose.kept}
    strict = mine_rules(bank, "keyroom", config=MiningConfig(max_p_value=0.01), dry_run=True)
    dead = by_text(strict)[DEAD_END]
    assert not dead.kept and dead.reason.startswith("p-value 0.047 > 0.01")
    capped = mine_rules(bank, "keyroom", config=MiningConfig(max_rules=1), dry_run=True)
    assert [c.text for c in capped.kept] == [DEAD_END]  # the most support among rules of confidence 1
    assert by_text(capped)[PRECONDITION].reason.startswith("outranked")


def test_mined_rules_are_stored_marked_and_idempotent(bank):
    first = mine_rules(bank, "keyroom")
    assert sorted(c.op for c in first.changes) == ["add"] * 4
    rules = {r.text: r for r in bank.rules("keyroom")}
    assert set(rules) == {PRECONDITION, KEY_THEN_DOOR, DOOR_THEN_CHEST, DEAD_END}
    pre = rules[PRECONDITION]
    assert pre.id == rule_record_id("keyroom", PRECONDITION) and pre.model == "mined" and pre.score == 2.0
    assert {"mined", "mined:precondition", "support=4", "counter=0", "confidence=1.00"} <= set(pre.tags)
    assert pre.provenance == [f"ep:keyroom:r1-{i:04d}" for i in range(4)] and pre.reflections == [first.id]
    journal = len(bank.history(pre.id))

    bank.vote_rule(pre.id, 1.0, "reflect:rf-test", reason="AGREE")  # the reflector agrees once
    again = mine_rules(bank, "keyroom")
    assert {c.op for c in again.changes} == {"unchanged"}
    assert len(bank.rules("keyroom")) == 4 and len(bank.history(pre.id)) == journal + 1
    assert bank.get(pre.id).score == 3.0  # votes are not reset by mining again

    store(bank, "r3", 0, WIN, True)
    grown = mine_rules(bank, "keyroom")
    updated = bank.get(pre.id)
    assert "support=5" in updated.tags and "support=4" not in updated.tags and updated.score == 3.0
    assert PRECONDITION in {c.text for c in grown.changes if c.op == "update"}


def test_a_mined_rule_below_the_thresholds_later_is_quarantined_then_released(bank):
    mine_rules(bank, "keyroom")
    rid = rule_record_id("keyroom", PRECONDITION)
    luck = [(KITCHEN, "unlock door with brass key", True, NONE)]  # the lock gave way without the key
    for i in range(4):
        store(bank, "r4", i, luck, False)
    report = mine_rules(bank, "keyroom")
    assert by_text(report)[PRECONDITION].reason == "confidence 0.50 < 0.9"
    rule = bank.get(rid)
    assert rule.tier == "quarantine" and STALE_TAG in rule.tags
    assert rid not in {r.id for r in bank.rules("keyroom")}  # out of prompts
    released = mine_rules(bank, "keyroom", config=MiningConfig(min_confidence=0.5))
    assert ("release", rid) in {(c.op, c.rule_id) for c in released.changes}
    rule = bank.get(rid)
    assert rule.tier == "regular" and STALE_TAG not in rule.tags and "confidence=0.50" in rule.tags


def test_a_mined_rule_removed_by_votes_is_not_stored_again(bank):
    mine_rules(bank, "keyroom")
    rid = rule_record_id("keyroom", PRECONDITION)
    bank.rm(rid, reason="score 0 <= 0 after DOWNVOTE")
    report = mine_rules(bank, "keyroom")
    assert ("skip", rid) in {(c.op, c.rule_id) for c in report.changes}
    assert rid not in {r.id for r in bank.rules("keyroom", include_quarantine=True)}
    mine_rules(bank, "keyroom", config=MiningConfig(revive_removed=True))
    assert bank.get(rid).text == PRECONDITION


def test_mined_rules_reach_the_prompt_like_written_ones(bank):
    mine_rules(bank, "keyroom")
    query = RetrievalQuery("keyroom", "keyroom/compound", GOAL, KITCHEN, ["go east"], None, seed=0)
    retriever = Retriever(bank, RetrievalConfig(epsilon=0.0, k_rules=5))
    pack = retriever.retrieve([query])[0]
    advisor = MemoryAdvisor(bank, retriever, mode="full", learn=False)
    section = render_memory(advisor.prompt_items(pack))
    for text in (PRECONDITION, KEY_THEN_DOOR, DOOR_THEN_CHEST, DEAD_END):
        assert text in section
    assert all(m.breakdown["rule_score"] > 0 for m in pack.rules)  # ranked by the same votes


def test_report_rows_and_json(bank):
    report = mine_rules(bank, "keyroom")
    rows = report.rows()
    assert [r["kept"] for r in rows] == ["yes"] * 4 and {r["note"] for r in rows} == {"add"}
    assert len(report.rows(dropped=True)) == len(report.candidates)
    data = report.to_dict()
    assert data["kept"] == 4 and data["config"]["min_support"] == 3 and not data["dry_run"]
    assert "4 rule(s) kept" in report.summary() and "4 add" in report.summary()


def test_real_keyroom_play_gives_the_sub_goal_order(tmp_path):
    from crl.tasks.keyroom import solve
    from tests.test_synthesis import play

    real = open_test_bank(tmp_path)
    try:
        for seed in range(4):
            for variant in ("door", "compound"):  # `door` starts with the key: granted, so it came first
                task = f"keyroom/{variant}?n_rooms=3"
                real.ingest_episode(play(task, seed, solve(seed, variant, n_rooms=3), f"{variant}-{seed}"))
        report = mine_rules(real, "keyroom", dry_run=True)
    finally:
        real.close()
    kept = {c.text: c.support for c in report.kept}
    assert kept == {
        "'take treasure' succeeds only after 'open door'.": 4,
        "Reach sub-goal 'door' only after sub-goal 'key'.": 8,
    }
