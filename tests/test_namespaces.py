"""Namespaces: several memories in one data directory and one Chroma store, and nothing crosses.

The property test writes random record sets into two namespaces of one home (run logs with
their `run.json`, synced; rules; sometimes the same episode ids in both) and checks that no
record of one is ever retrieved, used for action values, reflected on, mined, stitched from,
put in a dataset or exported for the other — zero, over every example.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crl.finetune.config import FinetuneConfig
from crl.finetune.source import load_episodes
from crl.memory.bank import ExperienceBank
from crl.memory.config import MemoryConfig
from crl.memory.reflection.mined_rules import mined_episodes
from crl.memory.reflection.reflector import Reflector
from crl.memory.retrieval.retriever import RetrievalQuery, Retriever
from crl.memory.storage.embeddings import HashingEmbedding
from crl.memory.storage.namespaces import namespace_dir, namespaces
from crl.memory.synthesis.bank_io import episodes_from_bank
from tests.chroma_server import chroma_server, make_episode, no_default_embedding, write_log  # noqa: F401

TOKENS = {"a": "zebra", "b": "walrus"}  # words only one namespace's observations hold


def open_ns(memory: Path, runs: Path, namespace: str, url: str | None = None) -> ExperienceBank:
    config = MemoryConfig(namespace=namespace, url=url, fsync_journal=False, lock_timeout_s=5)
    return ExperienceBank(memory, runs, config, embedder=HashingEmbedding(64), actor="test")


def write_run(runs: Path, run_id: str, namespace: str, episodes) -> None:
    """A run log and the `run.json` saying which namespace the run learns into (as `crl run` writes it)."""
    write_log(runs, run_id, episodes)
    (runs / run_id / "run.json").write_text(
        json.dumps({"run_id": run_id, "settings": {"memory": {"namespace": namespace}}})
    )


def words_of(label: str, i: int) -> str:
    return f"You are in the hall with a {TOKENS[label]} number {i}. Exits lead north."


def leaks(records, other: str) -> list[str]:
    """Ids of records whose stored text mentions the other namespace's word."""
    word = TOKENS[other]
    out = []
    for r in records:
        body = r.model_dump_json() if hasattr(r, "model_dump_json") else json.dumps(r.to_dict())
        if word in body:
            out.append(getattr(r, "id", None) or getattr(r, "episode_id", ""))
    return out


def check_isolated(bank: ExperienceBank, own: str, other: str, own_ids: set[str], tmp: Path) -> None:
    """Every way memory is read, for namespace `own`: nothing of `other`."""
    probe = words_of(other, 0)
    stored = bank.ls(kind="episode") + bank.ls(kind="step") + bank.ls(kind="rule")
    assert {r.id for r in stored} <= own_ids
    assert not leaks(stored, other)
    # retrieval and episodic control, asked with the other namespace's exact states
    hits = bank.search(probe, k=50) + bank.query_steps("keyroom", [probe], k=50)[0]
    hits += bank.query_episodes("keyroom", [probe], k=50)[0] + bank.query_rules([probe], k=50)[0]
    assert {h.id for h in hits} <= own_ids and not leaks([h.record for h in hits], other)
    query = RetrievalQuery("keyroom", "keyroom/key", "Take the key.", probe, admissible=["go north", "take key"])
    pack = Retriever(bank, seed=0).retrieve([query])[0]
    assert set(pack.used_ids()) <= own_ids
    assert not leaks([rec for rec, _ in pack.neighbours], other)
    # reflection, mined rules, stitching and dataset inputs
    due = Reflector(bank, model=None).due()
    assert {e.id for item in due for e in item.episodes} <= own_ids
    assert {rid for rid, _ in mined_episodes(bank, "keyroom")} <= own_ids
    assert not leaks(episodes_from_bank(bank, "keyroom", source=None), other)
    loaded = load_episodes(bank, FinetuneConfig())
    assert {e.id for e in loaded.episodes} <= own_ids and not leaks([e.record for e in loaded.episodes], other)
    # export: only this namespace, each record labelled with it
    out = tmp / f"export-{own}.jsonl"
    bank.export(out)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["id"] for r in lines} <= own_ids
    assert {r["namespace"] for r in lines} <= {bank.namespace}
    assert TOKENS[other] not in out.read_text()


record_sets = st.lists(
    st.tuples(st.sampled_from("ab"), st.booleans(), st.integers(1, 4), st.booleans()), min_size=1, max_size=8
)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record_sets)
def test_no_record_crosses_a_namespace(chroma_server, episodes):  # noqa: F811
    tmp = Path(tempfile.mkdtemp(prefix="crl-ns-"))
    tag = uuid.uuid4().hex[:6]
    names = {"a": "a" + tag, "b": "b" + tag}
    try:
        memory, runs = tmp / "memory", tmp / "runs"
        own_ids: dict[str, set[str]] = {"a": set(), "b": set()}
        by_ns: dict[str, list] = {"a": [], "b": []}
        shared = {"a": 0, "b": 0}
        for i, (label, success, n_steps, shared_id) in enumerate(episodes):
            # a shared id: both namespaces may hold an episode with this id, with different content
            if shared_id:
                ep = make_episode("shared", shared[label], success, n_steps=n_steps, words=words_of(label, i))
                shared[label] += 1
            else:
                ep = make_episode(f"run{label}", i, success, n_steps=n_steps, words=words_of(label, i))
            by_ns[label].append(ep)
        banks = {}
        for label in "ab":
            # run ids are per namespace here (as real runs' are unique), the episode ids may collide
            for run_id in sorted({e.run_id for e in by_ns[label]}):
                eps = [e for e in by_ns[label] if e.run_id == run_id]
                folder = f"{run_id}{label}"
                for e in eps:
                    e.run_id = folder
                write_run(runs, folder, names[label], eps)
            banks[label] = open_ns(memory, runs, names[label], chroma_server.url)
        for label, bank in banks.items():
            report = bank.sync()
            assert report.errors == []
            assert report.episodes_ingested == len(by_ns[label])
            bank.add_rule(f"When you see a {TOKENS[label]}, go north.", scope="keyroom")
            own_ids[label] = {r.id for k in ("episode", "step", "rule") for r in bank.ls(kind=k)}
            assert len(bank.ls(kind="episode")) == len(by_ns[label])
        for own, other in (("a", "b"), ("b", "a")):
            check_isolated(banks[own], own, other, own_ids[own], tmp)
        # a run of one namespace is refused by the other, with the way out named
        if by_ns["a"]:
            with pytest.raises(ValueError, match=f"--namespace {names['a']}"):
                banks["b"].ingest_episode(by_ns["a"][0])
        for bank in banks.values():
            bank.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_namespaces_share_one_embedded_home_and_rebuild_apart(tmp_path):
    memory, runs = tmp_path / "memory", tmp_path / "runs"
    write_run(runs, "ra", "alice", [make_episode("ra", i, i % 2 == 0, words=words_of("a", i)) for i in range(3)])
    write_run(runs, "rb", "bob", [make_episode("rb", i, True, words=words_of("b", i)) for i in range(2)])
    for name, count in (("alice", 3), ("bob", 2)):
        with open_ns(memory, runs, name) as bank:
            assert bank.sync().episodes_ingested == count
    # the first namespace keeps the top of the memory directory; the others get their own folder
    assert namespace_dir(memory, "alice") == memory and namespace_dir(memory, "bob") == memory / "namespaces" / "bob"
    assert namespaces(memory) == ["alice", "bob"]
    assert (memory / "journal.jsonl").exists() and (memory / "namespaces" / "bob" / "journal.jsonl").exists()
    with open_ns(memory, runs, "bob") as bank:
        report = bank.rebuild()
        assert (report.episodes, len(bank.ls())) == (2, 2)
        assert not leaks(bank.ls(kind="step"), "a")
    with open_ns(memory, runs, "alice") as bank:
        assert len(bank.ls()) == 3 and bank.sync().episodes_ingested == 0


def test_import_keeps_its_namespace(tmp_path):
    memory, runs = tmp_path / "memory", tmp_path / "runs"
    write_run(runs, "ra", "alice", [make_episode("ra", i, True, words=words_of("a", i)) for i in range(2)])
    export = tmp_path / "alice.jsonl"
    with open_ns(memory, runs, "alice") as bank:
        bank.sync()
        assert bank.export(export) == 2 + 2 * 4
    with open_ns(memory, runs, "bob") as bank:
        with pytest.raises(ValueError, match="namespace 'alice'.*--namespace alice"):
            bank.import_file(export)
        assert bank.ls() == []
        assert not (bank.dir / "imports").exists()
    other = tmp_path / "other"  # another home: the export lands in namespace alice there too
    with open_ns(other, tmp_path / "none", "alice") as bank:
        report = bank.import_file(export)
        assert report.episodes == 2 and len(bank.ls(kind="step")) == 8
        assert all(r.namespace is None for r in bank.ls(kind="step"))  # in the bank, the collections say it
        again = tmp_path / "again.jsonl"
        bank.export(again)
        first, second = ([json.loads(x) for x in f.read_text().splitlines()] for f in (export, again))
        assert [(r["id"], r["namespace"], r["kind"]) for r in first] == [
            (r["id"], r["namespace"], r["kind"]) for r in second
        ]
    with open_ns(memory, runs, "bob") as bank:  # a deliberate copy into another namespace, relabelled
        report = bank.import_file(export, from_namespace="alice")
        assert report.episodes == 2 and all(r.namespace is None for r in bank.ls(kind="step"))
        copied = tmp_path / "bob.jsonl"
        bank.export(copied)
        assert {json.loads(x)["namespace"] for x in copied.read_text().splitlines()} == {"bob"}
        assert not list((bank.dir / "imports").glob("*.part"))


def test_namespace_option_on_the_command_line(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from crl.agent.cli.main import app

    home = tmp_path / "home"
    runs = home / "runs"
    write_run(runs, "ra", "alice", [make_episode("ra", 0, True, words=words_of("a", 0))])
    write_run(runs, "rb", "bob", [make_episode("rb", i, True, words=words_of("b", i)) for i in range(2)])
    monkeypatch.setattr(
        "crl.memory.storage.embeddings.SentenceTransformerEmbedding.from_config",
        classmethod(lambda cls, config: HashingEmbedding(64)),
    )
    cli = CliRunner()
    counts = {}
    for args in (["--namespace", "alice"], ["--namespace", "bob"]):
        result = cli.invoke(app, ["--home", str(home), *args, "memory", "sync", "--json"])
        assert result.exit_code == 0, result.output
        listing = cli.invoke(app, ["--home", str(home), *args, "memory", "ls", "--json"])
        assert listing.exit_code == 0, listing.output
        counts[args[1]] = len(json.loads(listing.output))
    assert counts == {"alice": 1, "bob": 2}
    monkeypatch.setenv("CRL_MEMORY__NAMESPACE", "bob")
    listing = cli.invoke(app, ["--home", str(home), "memory", "ls", "--json"])
    assert listing.exit_code == 0 and len(json.loads(listing.output)) == 2
    bad = cli.invoke(app, ["--home", str(home), "--namespace", "no-dash", "memory", "ls"])
    assert bad.exit_code != 0 and "letters and digits" in bad.output and "Traceback" not in bad.output


def test_a_home_from_before_namespaces_is_not_taken_by_a_mistyped_namespace(tmp_path):
    memory, runs = tmp_path / "memory", tmp_path / "runs"
    write_log(runs, "r0", [make_episode("r0", i, True, words=words_of("a", i)) for i in range(2)])
    for legacy in ("crl", "team"):
        home = memory / legacy
        with open_ns(home, runs, legacy) as bank:
            assert bank.sync().episodes_ingested == 2
        (home / "namespace").unlink()  # as a memory directory written before namespaces existed
        with open_ns(home, runs, "tpyo") as bank:
            assert bank.dir == home / "namespaces" / "tpyo" and bank.ls() == []
        assert not (home / "namespace").exists()
        with open_ns(home, runs, legacy) as bank:  # its own namespace still finds it at the top
            assert bank.dir == home and len(bank.ls()) == 2 and bank.sync().episodes_ingested == 0
        assert namespaces(home) == [legacy, "tpyo"]


def test_stitching_builds_only_from_its_own_namespace(tmp_path):
    from crl.memory.synthesis.bank_pass import synthesize_bank
    from tests.test_synthesis import COMPOUND, SEED, solved

    memory, runs = tmp_path / "memory", tmp_path / "runs"
    with open_ns(memory, runs, "alice") as bank:  # alice holds the three skills of one world
        for variant in ("key", "door", "chest"):
            bank.ingest_episode(solved(variant))
    with open_ns(memory, runs, "bob") as bank:  # bob played nothing: nothing to stitch from
        result = synthesize_bank(bank, "keyroom", relabel=False, stitch_task=COMPOUND, seeds=[SEED])
        assert result.episodes == [] and bank.ls() == []
    with open_ns(memory, runs, "alice") as bank:
        result = synthesize_bank(bank, "keyroom", relabel=False, stitch_task=COMPOUND, seeds=[SEED])
        assert len(result.episodes) == 1 and result.episodes[0].success
        assert len(bank.ls(source="synthetic")) == 1
    with open_ns(memory, runs, "bob") as bank:
        assert bank.ls() == [] and bank.ls(kind="step") == []
