"""The experience bank against an embedded store and a real Chroma server (same tests, both modes)."""

from __future__ import annotations

import json
import os
import time

import chromadb
import numpy as np
import pytest
from chromadb.config import Settings
from chromadb.utils.embedding_functions import register_embedding_function

from crl.memory.bank import ExperienceBank, IngestError, RecordNotFoundError
from crl.memory.config import MemoryConfig
from crl.memory.records import SCHEMA_VERSION, state_text
from crl.memory.storage.embeddings import HashingEmbedding
from crl.memory.storage.journal import Journal, JournalEntry
from crl.memory.storage.store import NewerSchemaError, StoreError
from crl.memory.storage.transfer import ImportValidationError
from crl.memory.tags import ema_update
from tests.chroma_server import chroma_server, make_episode, mode, no_default_embedding, open_bank, write_log  # noqa: F401


def _step_count(bank: ExperienceBank, family: str = "keyroom") -> int:
    return bank.view.count("step", family)


def _episode_ids(bank: ExperienceBank) -> list[str]:
    return sorted(r.id for r in bank.ls())


def _raw_client(open_bank, tmp_path):
    settings = Settings(anonymized_telemetry=False)
    if open_bank.server is not None:
        port = int(open_bank.server.url.rsplit(":", 1)[1])
        return chromadb.HttpClient(host="127.0.0.1", port=port, settings=settings)
    return chromadb.PersistentClient(path=str(tmp_path / "memory" / "chroma"), settings=settings)


def test_ingest_is_idempotent_and_tags_records(open_bank, tmp_path):
    runs = tmp_path / "runs"
    write_log(runs, "r1", [make_episode("r1", i, success=i % 2 == 0) for i in range(4)])
    bank = open_bank()
    first = bank.sync()
    assert (first.episodes_ingested, first.steps_ingested) == (4, 16)
    os.utime(runs / "r1" / "episodes.jsonl")  # defeat the unchanged-log shortcut
    again = bank.sync()
    assert again.episodes_ingested == 0 and again.logs_read == 1
    assert bank.ingest_run_log(runs / "r1" / "episodes.jsonl").episodes_ingested == 0
    assert _step_count(bank) == 16 and len(bank.ls()) == 4

    ep = bank.get("r1-0000")
    assert ep.outcome == "success" and ep.skills == ["key"] and len(ep.trajectory) == 4
    assert ep.reward_sparsity == 0.75 and 0 <= ep.value <= 1
    last = bank.get("st:keyroom:r1-0000:3")
    assert last.skills == ["key"] and last.episode_outcome == "success"
    assert last.history == ["go north", "go south", "take key"]
    assert bank.get("r1-0001").outcome == "failure"


def test_queries_filter_by_outcome_and_never_return_quarantine(open_bank, tmp_path):
    bank = open_bank()
    for i in range(6):
        bank.ingest_episode(make_episode("r1", i, success=i % 2 == 0))
    probe = bank.get("st:keyroom:r1-0002:1").text
    hits = bank.query_steps("keyroom", [probe, probe], k=5)
    assert len(hits) == 2 and hits[0][0].id == "st:keyroom:r1-0002:1"
    assert hits[0][0].similarity == pytest.approx(1.0, abs=1e-4)
    ok = bank.query_steps("keyroom", [probe], k=5, where_outcome="success")[0]
    bad = bank.query_steps("keyroom", [probe], k=5, where_outcome="failure")[0]
    assert ok and all(h.record.episode_outcome == "success" for h in ok)
    assert bad and all(h.record.episode_outcome == "failure" for h in bad)

    bank.quarantine("r1-0002")
    for rows in (bank.query_steps("keyroom", [probe], k=30), bank.query_episodes("keyroom", [probe], k=30)):
        assert all(h.record.episode_id != "r1-0002" for h in rows[0])
    assert all(h.record.episode_id != "r1-0002" for h in bank.search(probe, k=50))
    with_q = bank.query_steps("keyroom", [probe], k=5, exclude_quarantine=False, where_outcome="success")[0]
    assert with_q[0].id == "st:keyroom:r1-0002:1"
    assert [r.id for r in bank.ls(tier="quarantine")] == ["ep:keyroom:r1-0002"]
    assert bank.get("st:keyroom:r1-0002:0").tier == "quarantine"

    bank.release("r1-0002")
    assert bank.query_steps("keyroom", [probe], k=1)[0][0].id == "st:keyroom:r1-0002:1"
    assert bank.query_steps("otherfamily", [probe], k=3) == [[]]


def test_curation_ops_are_journalled_and_listed(open_bank):
    bank = open_bank()
    for i in range(3):
        bank.ingest_episode(make_episode("r1", i, success=i == 0))
    bank.tag(["r1-0001"], ["tricky", "door"])
    bank.untag("r1-0001", "door")
    bank.pin("r1-0000")
    assert bank.get("r1-0001").tags == ["tricky"]
    assert [r.id for r in bank.ls(tag="tricky")] == ["ep:keyroom:r1-0001"]
    assert [r.id for r in bank.ls(tier="golden")] == ["ep:keyroom:r1-0000"]
    assert [r.id for r in bank.ls(outcome="success")] == ["ep:keyroom:r1-0000"]
    assert [r.id for r in bank.ls(skill="key")] == ["ep:keyroom:r1-0000"]
    assert len(bank.ls(kind="step", family="keyroom", outcome="failure")) == 8
    ops = [h.entry.op for h in bank.history("r1-0001")]
    assert ops == ["ingest", "tag", "untag"]
    assert [h.entry.op for h in bank.history("st:keyroom:r1-0000:2")] == ["ingest", "tier"]

    bank.rm("r1-0001")
    assert _episode_ids(bank) == ["ep:keyroom:r1-0000", "ep:keyroom:r1-0002"]
    assert _step_count(bank) == 8
    with pytest.raises(RecordNotFoundError):
        bank.get("ep:keyroom:r1-0001")
    assert bank.ingest_episode(make_episode("r1", 1, success=False)).skipped  # removed stays removed

    stats = bank.stats()
    assert (stats.episodes, stats.steps) == (2, 8)
    assert stats.by_tier == {"golden": 1, "regular": 1} and stats.by_outcome == {"success": 1, "failure": 1}
    assert sum(c for _, _, c in stats.value_histogram) == 2 and stats.disk_bytes > 0


def test_credit_moves_value_by_ema(open_bank):
    bank = open_bank(value_alpha=0.25)
    bank.ingest_episode(make_episode("r1", 0, success=False))
    sid = "st:keyroom:r1-0000:1"
    v0 = bank.get(sid).value
    bank.credit([sid], success=True)
    bank.credit([sid], success=False)
    rec = bank.get(sid)
    assert rec.value == pytest.approx(ema_update(ema_update(v0, 1.0, 0.25), 0.0, 0.25))
    assert (rec.use_count, rec.use_successes, rec.utility) == (2, 1, pytest.approx(0.5))
    assert rec.last_used_at is not None


def test_novelty_of_repeated_and_new_states(open_bank):
    bank = open_bank()
    hall = "a dusty hall with a brass key"
    bank.ingest_episode(make_episode("r1", 0, success=True, n_steps=2, words=hall, goal="Find the key."))
    assert bank.get("st:keyroom:r1-0000:0").novelty == pytest.approx(1.0, abs=1e-6)  # empty bank
    assert bank.get("st:keyroom:r1-0000:1").novelty < 0.5  # same room, one more action in its history
    bank.ingest_episode(make_episode("r1", 1, success=True, n_steps=1, words=hall, goal="Find the key."))
    strange = "zebra quantum violin marmalade orbit saxophone glacier lantern cobalt thimble walrus"
    bank.ingest_episode(
        make_episode("r1", 2, success=True, n_steps=1, words=strange, goal="Juggle eleven teal pumpkins.")
    )
    assert bank.get("st:keyroom:r1-0001:0").novelty == pytest.approx(0.0, abs=1e-5)
    assert bank.get("st:keyroom:r1-0002:0").novelty > 0.75


def test_unfinished_episode_is_completed_when_resumed(open_bank, tmp_path):
    runs = tmp_path / "runs"
    full = make_episode("r1", 0, success=True, n_steps=5)
    partial = make_episode("r1", 0, success=True, n_steps=5, finished=False)
    partial.steps = partial.steps[:3]
    bank = open_bank()
    write_log(runs, "r1", [partial])
    assert bank.sync().steps_ingested == 3
    assert bank.get("r1-0000").outcome == "unfinished"
    bank.tag("st:keyroom:r1-0000:0", "kept")
    bank.pin("r1-0000")
    result = bank.ingest_episode(full)
    assert result.new_steps == 2
    assert _step_count(bank) == 5
    assert {r.tier for r in bank.ls(kind="step")} == {"golden"}
    assert bank.get("r1-0000").outcome == "success"
    assert bank.get("st:keyroom:r1-0000:0").tags == ["kept"]  # curation survives completion
    assert bank.query_steps("keyroom", [bank.get("st:keyroom:r1-0000:0").text], k=1, where_outcome="success")[0]
    assert not bank.query_steps("keyroom", [bank.get("st:keyroom:r1-0000:0").text], k=5, where_outcome="failure")[0]


def test_replay_on_startup_applies_what_was_logged_but_not_applied(open_bank, tmp_path):
    runs = tmp_path / "runs"
    bank = open_bank()
    bank.ingest_episode(make_episode("r1", 0, success=True))
    bank.close()
    # a run that was killed before the bank saw it, and journal entries never applied
    write_log(runs, "r2", [make_episode("r2", 0, success=False), make_episode("r2", 1, success=True, finished=False)])
    journal = Journal(tmp_path / "memory" / "journal.jsonl", fsync=False)
    journal.append(
        [
            JournalEntry("tag", ["ep:keyroom:r1-0000"], {"tags": ["late"]}, "test"),
            JournalEntry("credit", ["st:keyroom:r1-0000:0"], {"success": True, "target": 1.0, "alpha": 0.5}, "test"),
        ]
    )
    bank = open_bank()
    assert bank.get("r1-0000").tags == ["late"]
    assert bank.get("st:keyroom:r1-0000:0").use_count == 1
    assert bank.sync().steps_ingested == 8
    assert _step_count(bank) == 12
    bank.close()
    # losing the watermark replays everything; per-record journal offsets keep credit from counting twice
    (tmp_path / "memory" / "view_state.json").unlink()
    bank = open_bank()
    assert bank.get("st:keyroom:r1-0000:0").use_count == 1
    assert _step_count(bank) == 12 and len(bank.ls()) == 3


def test_rebuild_now_and_as_of_a_past_time(open_bank, tmp_path):
    runs = tmp_path / "runs"
    write_log(runs, "r1", [make_episode("r1", 0, success=True)])
    bank = open_bank()
    bank.sync()
    bank.tag("r1-0000", "early")
    bank.credit(["st:keyroom:r1-0000:1"], success=True)
    time.sleep(0.05)
    t_mid = time.time()
    time.sleep(0.05)
    write_log(runs, "r1", [make_episode("r1", 1, success=False)])
    bank.sync()
    bank.tag("r1-0000", "late")
    before = (bank.get("r1-0000").tags, bank.get("st:keyroom:r1-0000:1").value, _step_count(bank))

    report = bank.rebuild()
    assert report.reused_vectors > 0 and not report.missing
    assert (bank.get("r1-0000").tags, bank.get("st:keyroom:r1-0000:1").value, _step_count(bank)) == before

    bank.rebuild(as_of=t_mid)
    assert _episode_ids(bank) == ["ep:keyroom:r1-0000"]
    assert bank.get("r1-0000").tags == ["early"]
    assert bank.get("st:keyroom:r1-0000:1").use_count == 1
    os.utime(runs / "r1" / "episodes.jsonl")
    assert bank.sync().episodes_ingested == 0  # the rollback sticks: r1-0001 is not ingested again
    cancelled = [h.entry.payload.get("tags") for h in bank.history("r1-0000") if h.cancelled]
    assert cancelled == [["late"]]
    bank.close()
    bank = open_bank()  # and survives a restart
    assert _episode_ids(bank) == ["ep:keyroom:r1-0000"]


def test_export_import_round_trip_is_lossless(open_bank, tmp_path):
    bank = open_bank()
    for i in range(3):
        bank.ingest_episode(make_episode("r1", i, success=i == 1))
    bank.tag("r1-0000", "x")
    bank.quarantine("r1-0002")
    bank.credit(["st:keyroom:r1-0001:0"], success=True)
    rule_id = bank.add_rule("Take the key before trying the door.", scope="keyroom", provenance=["ep:keyroom:r1-0001"])
    first = tmp_path / "a.jsonl"
    assert bank.export(first) == 3 + 12 + 1
    other = open_bank(memory_dir=tmp_path / "memory2", runs_dir=tmp_path / "none", namespace=open_bank.namespace + "b")
    report = other.import_file(first, from_namespace=open_bank.namespace)  # a deliberate copy across namespaces
    assert (report.episodes, report.steps, report.rules) == (3, 12, 1)
    assert {r.id for r in other.review_queue()} == {f"ep:keyroom:r1-000{i}" for i in range(3)} | {rule_id}
    other.review(["r1-0000", "r1-0001", rule_id], "accept")
    other.review("r1-0002", "reject")  # rejected records stay quarantined, as it was at the source
    second = tmp_path / "b.jsonl"
    other.export(second)
    assert other.get("r1-0001").verified and not other.get("r1-0002").verified
    trust = {"verified", "verified_by", "imported_from", "review", "namespace", "updated_at"}  # curator decisions

    def kept(path):
        return [{k: v for k, v in json.loads(x).items() if k not in trust} for x in path.read_text().splitlines()]

    assert kept(first) == kept(second)
    assert other.get("r1-0002").tier == "quarantine"
    probe = other.get("st:keyroom:r1-0001:0").text
    assert other.query_steps("keyroom", [probe], k=1)[0][0].id == "st:keyroom:r1-0001:0"
    assert [h.entry.op for h in other.history("r1-0000")] == ["import", "review"]


def test_malformed_import_is_rejected_with_line_numbers_and_nothing_written(open_bank, tmp_path):
    bank = open_bank(max_field_chars=1000)
    bank.ingest_episode(make_episode("r1", 0, success=True))
    good = tmp_path / "good.jsonl"
    bank.export(good)
    lines = good.read_text().splitlines()
    step = json.loads(lines[1])
    bad_lines = [
        lines[0],
        "{not json",
        json.dumps(step | {"reward": "lots"}),
        json.dumps(step | {"reward": float("nan")}),
        json.dumps(step | {"observation": "x" * 5000}),
        json.dumps(step | {"schema_version": SCHEMA_VERSION + 1}),
        json.dumps(step | {"surprise": 1}),
        json.dumps(step | {"id": "st:keyroom:other:0"}),
    ]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(bad_lines) + "\n")
    journal_size = (tmp_path / "memory" / "journal.jsonl").stat().st_size
    with pytest.raises(ImportValidationError) as err:
        bank.import_file(bad)
    lines_reported = [n for n, _ in err.value.errors]
    assert lines_reported == [2, 3, 4, 5, 6, 7, 8]
    text = str(err.value)
    assert "line 4" in text and "NaN" in text and "newer" in text and "5000 characters" in text
    assert (tmp_path / "memory" / "journal.jsonl").stat().st_size == journal_size
    assert not (tmp_path / "memory" / "imports").exists()
    assert _step_count(bank) == 4


def test_eviction_respects_capacity_and_never_evicts_golden(open_bank):
    bank = open_bank(capacity_per_family=3, auto_evict=False)
    for i in range(5):
        bank.ingest_episode(make_episode("r1", i, success=i >= 3))  # r1-0000..2 fail: lowest value
    bank.pin("r1-0000")
    bank.quarantine("r1-0004")
    plan = bank.evict(dry_run=True)
    assert len(bank.ls()) == 5
    assert [c.id for c in plan] == sorted(c.id for c in plan) and len(plan) == 1
    assert plan[0].id in {"ep:keyroom:r1-0001", "ep:keyroom:r1-0002"}
    bank.evict()
    ids = _episode_ids(bank)
    assert "ep:keyroom:r1-0000" in ids and "ep:keyroom:r1-0004" in ids and plan[0].id not in ids
    assert len([r for r in bank.ls() if r.tier != "quarantine"]) == 3
    auto = open_bank(memory_dir=bank.dir.parent / "auto", capacity_per_family=2, namespace=open_bank.namespace + "c")
    for i in range(4):
        auto.ingest_episode(make_episode("r9", i, success=False))
    assert len(auto.ls()) == 2 and auto.history(auto.ls()[0].id)


def test_rules_are_stored_voted_and_searched(open_bank):
    bank = open_bank()
    rid = bank.add_rule("Take the key before the door.", scope="keyroom", provenance=["ep:keyroom:r1-0000"])
    bank.add_rule("Read the goal twice.")
    bank.vote_rule(rid, -0.5)
    bank.edit_rule(rid, "Always take the key before opening the door.")
    rules = bank.rules("keyroom")
    assert [r.text for r in rules] == ["Read the goal twice.", "Always take the key before opening the door."]
    assert rules[1].score == 0.5 and rules[1].id == rid
    hits = bank.query_rules(["open the door with the key"], scope="keyroom", k=1)[0]
    assert hits[0].id == rid
    bank.rm(rid)
    assert [r.text for r in bank.rules()] == ["Read the goal twice."]


def test_background_ingest_and_its_errors(open_bank):
    bank = open_bank()
    for i in range(3):
        bank.submit(make_episode("r1", i, success=True))
    bank.flush()
    assert len(bank.ls()) == 3

    class Broken(HashingEmbedding):
        def embed(self, texts):
            raise RuntimeError("embedding exploded")

    bank.embedder = Broken(64)
    bank.submit(make_episode("r1", 7, success=True))
    with pytest.raises(IngestError, match="embedding exploded"):
        bank.flush()
    bank.flush()  # reported once


def test_newer_schema_is_refused_and_older_is_migrated(open_bank, tmp_path):
    bank = open_bank()
    bank.ingest_episode(make_episode("r1", 0, success=True))
    bank.close()
    client = _raw_client(open_bank, tmp_path)
    meta = client.get_collection(f"{open_bank.namespace}-meta")
    stamp = dict(meta.metadata)
    meta.modify(metadata=stamp | {"schema_version": SCHEMA_VERSION + 1})
    if open_bank.server is None:
        getattr(client, "close", lambda: None)()  # Client.close is newer than chromadb 1.2
    with pytest.raises(NewerSchemaError, match="newer crl"):
        open_bank()
    client = _raw_client(open_bank, tmp_path)
    client.get_collection(f"{open_bank.namespace}-meta").modify(metadata=stamp | {"schema_version": 0})
    if open_bank.server is None:
        getattr(client, "close", lambda: None)()  # Client.close is newer than chromadb 1.2
    bank = open_bank()
    assert any("migrated" in w for w in bank.warnings)
    assert list((tmp_path / "memory" / "backups").glob("view-v0-*.jsonl"))
    assert bank.view.meta()["schema_version"] == SCHEMA_VERSION
    assert _step_count(bank) == 4 and bank.get("r1-0000").outcome == "success"


def test_changed_embedding_model_needs_a_rebuild(open_bank, tmp_path):
    bank = open_bank()
    bank.ingest_episode(make_episode("r1", 0, success=True))
    bank.close()
    with pytest.raises(StoreError, match="crl memory rebuild"):
        open_bank(embedder=HashingEmbedding(32))
    bank = ExperienceBank(
        tmp_path / "memory",
        tmp_path / "runs",
        MemoryConfig(namespace=open_bank.namespace, url=open_bank.server.url if open_bank.server else None),
        embedder=HashingEmbedding(32),
        rebuild_on_model_change=True,
    )
    try:
        assert bank.view.meta()["embedding"] == "hashing:32" and _step_count(bank) == 4
        assert bank.query_steps("keyroom", [state_text("x", "y", [])], k=1)[0]
    finally:
        bank.close()


class _OlderHashing(HashingEmbedding):
    """The same vectors under another registered name: a collection an older crl wrote."""

    @staticmethod
    def name() -> str:
        return "crl-hashing-older"


register_embedding_function(_OlderHashing)


def test_collections_with_an_older_embedding_function_are_converted_on_open(open_bank):
    bank = open_bank(embedder=_OlderHashing(64))
    bank.ingest_episode(make_episode("r1", 0, success=True))
    bank.close()
    bank = open_bank()  # another embedding function than the stored one: rebuilt from the logs on open
    assert bank.view.legacy_collections() == []
    assert _step_count(bank) == 4 and bank.get("r1-0000").outcome == "success"
    bank.ingest_episode(make_episode("r1", 1, success=False))
    assert bank.query_steps("keyroom", [state_text("x", "y", [])], k=1)[0]
    assert _step_count(bank) == 8


def test_unknown_ids_get_a_clear_error(open_bank):
    bank = open_bank()
    bank.ingest_episode(make_episode("r1", 0, success=True))
    bank.ingest_episode(make_episode("r1", 1, success=True))
    assert bank.resolve("r1-0001") == "ep:keyroom:r1-0001"
    with pytest.raises(RecordNotFoundError, match="matches 2 records"):
        bank.resolve("r1-")
    with pytest.raises(RecordNotFoundError, match="crl memory ls"):
        bank.get("nothing-like-it")
    with pytest.raises(ValueError, match="where_outcome"):
        bank.query_steps("keyroom", ["x"], where_outcome="won")


def test_query_batches_match_single_queries(open_bank):
    bank = open_bank()
    for i in range(5):
        bank.ingest_episode(make_episode("r1", i, success=i % 2 == 0))
    texts = [r.text for r in bank.ls(kind="step")[:6]]
    batched = bank.query_steps("keyroom", texts, k=3)
    single = [bank.query_steps("keyroom", [t], k=3)[0] for t in texts]
    assert [[h.id for h in row] for row in batched] == [[h.id for h in row] for row in single]
    vectors = bank.embed(texts)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert [[h.id for h in row] for row in bank.query_steps("keyroom", embeddings=vectors, k=3)] == [
        [h.id for h in row] for row in batched
    ]


def test_rebuild_reports_a_missing_run_log_and_keeps_inline_episodes(open_bank, tmp_path):
    runs = tmp_path / "runs"
    write_log(runs, "r1", [make_episode("r1", 0, success=True)])
    elsewhere = write_log(tmp_path / "other", "r2", [make_episode("r2", 0, success=False)])
    bank = open_bank()
    bank.sync()
    bank.ingest_run_log(elsewhere)  # outside the runs dir: the journal keeps the episode itself
    (runs / "r1" / "episodes.jsonl").unlink()
    elsewhere.unlink()
    report = bank.rebuild()
    assert len(report.missing) == 1 and "r1-0000" in report.missing[0] and "missing" in report.missing[0]
    assert _episode_ids(bank) == ["ep:keyroom:r2-0000"] and _step_count(bank) == 4
