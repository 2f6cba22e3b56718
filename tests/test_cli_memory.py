"""`crl memory ...` end to end: a bank filled by `crl run` with a scripted model, then every
curation command through the real CLI, embedded mode, with the bundled MiniLM embedder.

The bank is built once per module (two runs: 2 solved episodes, 3 failed ones) and copied
into each test's fresh data directory, so tests may change it freely. The MiniLM model is
loaded once and shared by every bank the tests open.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

import crl.agent.app
from crl.agent.cli.main import app
from crl.agent.llm.scripted import ScriptedModel
from crl.memory.storage.embeddings import SentenceTransformerEmbedding
from crl.tasks.keyroom import solve
from crl.tasks.registry import fold_seeds
from tests.chroma_server import chroma_server  # noqa: F401  (a fixture)

N_SOLVED, N_FAILED = 2, 3


def invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def memory(*args: str, ok: bool = True):
    """Run `crl memory ARGS`; with `ok`, assert it succeeded."""
    r = invoke("memory", *args)
    if ok:
        assert r.exit_code == 0, r.output
    return r


def as_json(result) -> object:
    return json.loads(result.stdout)


@pytest.fixture(scope="module")
def shared_embedder():
    """One MiniLM for every bank of this module (loading it costs seconds; embedding is quick)."""
    embedder = SentenceTransformerEmbedding()
    embedder.embed(["warm up"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SentenceTransformerEmbedding, "from_config", classmethod(lambda cls, config: embedder))
        yield embedder


@pytest.fixture(scope="module")
def built_home(tmp_path_factory, shared_embedder) -> Path:
    """A data directory after two `crl run keyroom/key` runs: N_SOLVED successes, N_FAILED failures."""
    root = tmp_path_factory.mktemp("memory-cli")
    home = root / ".crl"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        seeds = fold_seeds("keyroom/key", "train", N_SOLVED)
        solver = ScriptedModel([f" {a}" for s in seeds for a in solve(s, "key")])
        mp.setattr(crl.agent.app, "build_chat_model", lambda settings: solver)
        r = invoke("--home", home, "run", "keyroom/key", "-n", N_SOLVED, "--parallel", "1")
        assert r.exit_code == 0, r.output
        looker = ScriptedModel(lambda msgs: " look")
        mp.setattr(crl.agent.app, "build_chat_model", lambda settings: looker)
        r = invoke(
            "--home",
            home,
            "run",
            "keyroom/key",
            "-n",
            N_FAILED,
            "--seed",
            N_SOLVED,
            "--max-steps",
            "3",
            "--policy",
            "llm",
        )
        assert r.exit_code == 0, r.output
    return home


@pytest.fixture
def home(built_home, crl_home, monkeypatch) -> Path:
    """A private copy of the built data directory, selected by $CRL_HOME; tables 200 columns wide."""
    monkeypatch.setenv("COLUMNS", "200")
    shutil.copytree(built_home, crl_home)
    return crl_home


def episodes(*args: str) -> list[dict]:
    return as_json(memory("ls", "--json", *args))


def test_ls_lists_what_the_runs_stored_with_filters(home):
    rows = episodes()
    assert len(rows) == N_SOLVED + N_FAILED
    assert all(r["kind"] == "episode" and "trajectory" not in r for r in rows)
    assert {r["outcome"] for r in episodes("--success")} == {"success"}
    assert len(episodes("--success")) == N_SOLVED
    assert len(episodes("--failure")) == N_FAILED
    assert len(episodes("--skill", "key")) == N_SOLVED
    assert len(episodes("--family", "keyroom", "--variant", "key", "--tier", "regular", "--source", "real")) == 5
    assert episodes("--family", "nosuch") == [] and episodes("--source", "synthetic") == []
    by_value = [r["value"] for r in episodes("--sort", "value")]
    assert by_value == sorted(by_value, reverse=True) and by_value[0] > by_value[-1]
    assert len(episodes("--limit", "2")) == 2
    steps = as_json(memory("ls", "--kind", "step", "--json", "--limit", "0"))
    assert steps and all(s["kind"] == "step" for s in steps)

    table = memory("ls").output
    assert "5 episodes, by recent" in table
    for column in ("outcome", "return", "value", "utility", "uses", "tier", "skills", "age"):
        assert column in table
    assert "success" in table and "failure" in table and "keyroom/key" in table
    assert "1 more" in memory("ls", "-n", "4").output and "hidden" not in table
    r = memory("ls", "--sort", "nonsense", ok=False)
    assert r.exit_code == 2


def test_ls_drops_optional_columns_to_fit_a_narrow_terminal(home, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    lines = memory("ls").output.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert any("hidden to fit the terminal: task" in line for line in lines)
    ids = {r["episode_id"] for r in episodes()}
    assert sum(any(i in line for line in lines) for i in ids) == len(ids)  # ids are never cut


def test_show_prints_the_whole_trajectory_and_tags(home):
    solved = episodes("--success")[0]
    text = memory("show", solved["episode_id"]).output
    assert solved["goal"] in text and "Action: take" in text and "success" in text
    for field in ("value", "novelty", "utility", "tier", "source", "model", "run"):
        assert field in text
    assert solved["run_id"] in text

    record = as_json(memory("show", solved["id"], "--json"))
    assert record["id"] == solved["id"] and len(record["trajectory"]) == record["length"] > 0

    step = as_json(memory("show", f"{solved['id'].replace('ep:', 'st:', 1)}:0", "--json"))
    assert step["kind"] == "step" and step["index"] == 0
    r = memory("show", "no-such-episode", ok=False)
    assert r.exit_code == 1 and "crl memory ls" in r.output and "Traceback" not in r.output


def test_search_scores_and_family_filter(home):
    hits = as_json(memory("search", "take the key", "-k", "4", "--json"))
    assert 0 < len(hits) <= 4
    sims = [h["similarity"] for h in hits]
    assert sims == sorted(sims, reverse=True) and all(-1.0 <= s <= 1.0 for s in sims)
    assert len(as_json(memory("search", "take the key", "--family", "keyroom", "--json"))) > 0
    assert as_json(memory("search", "take the key", "--family", "nosuch", "--json")) == []
    table = memory("search", "take the key", "-k", "3").output
    assert "similarity" in table and f"{hits[0]['similarity']:.3f}" in table


def test_tag_pin_quarantine_release_show_in_ls_and_search(home):
    ok, bad = episodes("--success")[0], episodes("--failure")[0]
    memory("tag", ok["episode_id"], bad["episode_id"], "--tag", "reviewed", "--tag", "demo")
    assert {r["id"] for r in episodes("--tag", "reviewed")} == {ok["id"], bad["id"]}
    memory("untag", bad["episode_id"], "--tag", "demo")
    assert [r["id"] for r in episodes("--tag", "demo")] == [ok["id"]]

    memory("pin", ok["episode_id"])
    assert [r["id"] for r in episodes("--tier", "golden")] == [ok["id"]]
    memory("tag", ok["episode_id"], "--tag", "[red]odd")
    shown = memory("show", ok["episode_id"]).output
    assert "[red]odd" in shown and "golden" in shown  # stored text is printed literally, never as markup

    memory("quarantine", ok["episode_id"])
    assert [r["id"] for r in episodes("--tier", "quarantine")] == [ok["id"]]
    found = {h["record"]["episode_id"] for h in as_json(memory("search", ok["goal"], "-k", "50", "--json"))}
    assert ok["episode_id"] not in found
    found = as_json(memory("search", ok["goal"], "-k", "50", "--include-quarantine", "--json"))
    assert ok["episode_id"] in {h["record"]["episode_id"] for h in found}

    out = memory("release", ok["episode_id"], "--json")
    assert as_json(out) == {"action": "released (regular)", "ids": [ok["id"]]}
    assert episodes("--tier", "quarantine") == [] and len(episodes("--tier", "regular")) == 5


def test_rm_asks_unless_yes(home):
    victim = episodes("--failure")[0]
    r = memory("rm", victim["episode_id"], ok=False)
    assert r.exit_code == 1 and "--yes" in r.output
    assert len(episodes()) == 5
    memory("rm", victim["episode_id"], "--reason", "noise", "--yes")
    assert victim["id"] not in {r["id"] for r in episodes()} and len(episodes()) == 4
    r = memory("show", victim["episode_id"], ok=False)
    assert r.exit_code == 1


def test_evict_dry_run_lists_and_removes_nothing(home, monkeypatch):
    monkeypatch.setenv("CRL_MEMORY__CAPACITY_PER_FAMILY", "3")
    keep = episodes("--success")[0]
    memory("pin", keep["episode_id"])
    plan = as_json(memory("evict", "--dry-run", "--json"))
    assert plan["dry_run"] and plan["capacity_per_family"] == 3
    evicted = {c["id"] for c in plan["evicted"]}
    assert len(evicted) == 2 and keep["id"] not in evicted
    assert all("score" in c and "value" in c for c in plan["evicted"])
    assert len(episodes()) == 5
    assert "would evict 2" in memory("evict", "--dry-run").output

    assert "evicted 2" in memory("evict").output
    assert len(episodes()) == 3 and keep["id"] in {r["id"] for r in episodes()}
    assert "nothing to evict" in memory("evict").output


def test_export_import_round_trip_into_a_fresh_home(home, tmp_path):
    dump = tmp_path / "bank.jsonl"
    memory("tag", episodes("--success")[0]["episode_id"], "--tag", "keep")
    assert as_json(memory("export", dump, "--json"))["records"] > 5
    lines = dump.read_text().splitlines()

    fresh = tmp_path / "fresh"
    r = invoke("--home", fresh, "memory", "import", dump)
    assert r.exit_code == 0, r.output
    assert f"imported {N_SOLVED + N_FAILED} episode(s)" in r.output
    queued = json.loads(invoke("--home", fresh, "memory", "review", "--json").stdout)
    assert {q["id"] for q in queued if q["kind"] == "episode"} == {json.loads(x)["id"] for x in lines[:5]}
    accept = [arg for q in queued for arg in ("--accept", q["id"])]
    assert invoke("--home", fresh, "memory", "review", *accept).exit_code == 0
    again = tmp_path / "again.jsonl"
    assert invoke("--home", fresh, "memory", "export", again).exit_code == 0
    trust = {"verified_by", "imported_from", "review", "namespace", "updated_at"}  # vouched for by its curator

    def kept(text: str) -> list[dict]:
        return [{k: v for k, v in json.loads(x).items() if k not in trust} for x in text.splitlines()]

    assert kept(again.read_text()) == kept("\n".join(lines))
    r = invoke("--home", fresh, "memory", "ls", "--tag", "keep", "--json")
    assert len(json.loads(r.stdout)) == 1


def test_import_of_a_malformed_file_reports_lines_and_writes_nothing(home, tmp_path):
    dump = tmp_path / "bank.jsonl"
    memory("export", dump)
    lines = dump.read_text().splitlines()
    broken = json.loads(lines[1])
    broken["value"] = "high"
    lines[1] = json.dumps(broken)
    lines[3] = "{not json"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")

    fresh = tmp_path / "fresh"
    r = invoke("--home", fresh, "memory", "import", bad)
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "line 2:" in r.output and "line 4:" in r.output and "nothing imported" in r.output
    r = invoke("--home", fresh, "memory", "ls", "--json", "--kind", "step")
    assert r.exit_code == 0 and json.loads(r.stdout) == []
    r = memory("import", tmp_path / "missing.jsonl", ok=False)
    assert r.exit_code == 1 and "missing.jsonl" in r.output


def test_stats_counts_histogram_and_mode(home):
    s = as_json(memory("stats", "--json"))
    assert s["episodes"] == 5 and s["by_family"] == {"keyroom": 5}
    assert s["by_outcome"] == {"success": N_SOLVED, "failure": N_FAILED}
    assert s["by_tier"] == {"regular": 5} and s["by_source"] == {"real": 5}
    assert sum(n for *_, n in s["value_histogram"]) == 5 and s["disk_bytes"] > 0
    assert s["mode"] == "embedded" and "minilm" in s["embedding"].lower()
    text = memory("stats").output
    for word in ("by family", "by tier", "by outcome", "by source", "embedded", "█", "disk"):
        assert word in text


def test_history_shows_each_change_with_its_actor(home):
    ep = episodes("--success")[0]
    memory("tag", ep["episode_id"], "--tag", "seen")
    memory("pin", ep["episode_id"])
    items = as_json(memory("history", ep["episode_id"], "--json"))
    # later episodes of the same run that retrieved this one credited it in between
    curation = [i for i in items if i["op"] != "credit"]
    assert [i["op"] for i in curation] == ["ingest", "tag", "tier"]
    assert all(i["actor"].startswith("run:") for i in items if i["op"] == "credit")
    items = curation
    assert items[0]["actor"].startswith("run:") and "@" in items[1]["actor"]
    assert items[1]["summary"] == "seen" and items[2]["payload"] == {"tier": "golden"}
    assert not any(i["cancelled"] for i in items)
    table = memory("history", ep["episode_id"]).output
    assert "ingest" in table and "tier" in table and "golden" in table


def test_rebuild_as_of_cancels_later_changes(home):
    ep = episodes("--success")[0]
    assert "rebuilt" in memory("rebuild").output
    assert len(episodes()) == 5
    time.sleep(0.05)
    before = time.time()
    time.sleep(0.05)
    memory("tag", ep["episode_id"], "--tag", "late")
    assert len(episodes("--tag", "late")) == 1

    r = memory("rebuild", "--as-of", f"{before:.3f}", ok=False)
    assert r.exit_code == 1 and "--yes" in r.output and len(episodes("--tag", "late")) == 1
    report = as_json(memory("rebuild", "--as-of", f"{before:.3f}", "--yes", "--json"))
    assert report["episodes"] == 5 and report["as_of"] == pytest.approx(before, abs=1e-3)
    assert episodes("--tag", "late") == [] and len(episodes()) == 5
    items = [i for i in as_json(memory("history", ep["episode_id"], "--json")) if i["op"] != "credit"]
    assert [(i["op"], i["cancelled"]) for i in items] == [("ingest", False), ("tag", True)]
    r = memory("rebuild", "--as-of", "yesterday", ok=False)
    assert r.exit_code == 1 and "ISO 8601" in r.output


@pytest.mark.slow
def test_server_mode_through_memory_url(home, tmp_path, chroma_server, monkeypatch):
    from crl.agent.config import load_settings

    dump = tmp_path / "bank.jsonl"
    memory("export", dump)
    monkeypatch.setenv("CRL_MEMORY__NAMESPACE", "cli" + uuid.uuid4().hex[:8])
    fresh = tmp_path / "fresh"

    def on_server(*args: str):
        r = invoke("--home", fresh, "memory", *args, "--memory-url", chroma_server.url)
        assert r.exit_code == 0, r.output
        return r

    owner = crl.agent.app.open_bank(load_settings({"home": fresh}))  # its embedded store stays locked: no matter
    try:
        on_server("import", dump, "--from-namespace", "crl")  # the export's namespace, copied into this one
        queued = as_json(on_server("review", "--json"))  # an import waits for review
        on_server("review", *[arg for q in queued for arg in ("--accept", q["id"])])
        assert len(as_json(on_server("ls", "--json"))) == 5
        s = as_json(on_server("stats", "--json"))
        assert s["mode"] == f"server {chroma_server.url}" and s["episodes"] == 5
        ep = as_json(on_server("ls", "--success", "--json"))[0]
        on_server("quarantine", ep["episode_id"])
        hits = as_json(on_server("search", ep["goal"], "-k", "50", "--json"))
        assert hits and ep["episode_id"] not in {h["record"]["episode_id"] for h in hits}
    finally:
        owner.close()


def test_a_locked_store_names_server_mode(home):
    from crl.agent.config import load_settings

    bank = crl.agent.app.open_bank(load_settings())
    try:
        t0 = time.monotonic()
        r = memory("ls", ok=False)
        assert time.monotonic() - t0 < 5
    finally:
        bank.close()
    assert r.exit_code == 1 and "--memory-url" in r.output and "Traceback" not in r.output
    assert memory("ls").exit_code == 0


def test_curating_a_well_formed_id_of_no_record_is_refused_before_it_is_journalled(home):
    journal = home / "memory" / "journal.jsonl"
    before = journal.read_bytes()
    for command in (("pin",), ("quarantine",), ("tag", "-t", "x")):
        r = memory(*command, "ep:keyroom:nosuch-0000", ok=False)
        assert r.exit_code == 1 and "no memory record 'ep:keyroom:nosuch-0000'" in r.output
    assert journal.read_bytes() == before
    real = as_json(memory("ls", "--json"))[0]["id"]
    r = memory("pin", real, "ep:keyroom:nosuch-0000", ok=False)
    assert r.exit_code == 1 and journal.read_bytes() == before, "one missing id refuses the whole command"
