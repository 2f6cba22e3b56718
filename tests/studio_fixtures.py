"""A small data directory for the studio tests: two `crl run` runs with scripted models (2 solved
keyroom/key episodes, then 3 failed ones whose steps retrieved the first ones), a rule, two
registered adapters with a gate decision, and one experiment's results folder.

Built once per test session into a shared folder, copied into each test's fresh home, so tests
may change it. The bank embeds with the bundled MiniLM (real embeddings), loaded once.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import crl.agent.app
from crl.agent.cli.main import app as cli_app
from crl.agent.llm.scripted import ScriptedModel
from crl.finetune.registry import AdapterRegistry, GateRecord
from crl.memory.storage.embeddings import SentenceTransformerEmbedding
from crl.tasks.keyroom import solve
from crl.tasks.registry import fold_seeds
from tests.finetune_fixtures import BASE, register_fake  # noqa: F401  (BASE: the tests use it)

N_SOLVED, N_FAILED = 2, 3
RULE_TEXT = "Pick up the key before you try the door."
REPO = Path(__file__).resolve().parent.parent


def invoke(*args) -> object:
    """Run the real `crl` CLI in-process."""
    return CliRunner().invoke(cli_app, [str(a) for a in args])


@pytest.fixture(scope="session")
def minilm() -> SentenceTransformerEmbedding:
    """One MiniLM for every bank the studio tests open (loading it costs seconds)."""
    embedder = SentenceTransformerEmbedding()
    embedder.embed(["warm up"])
    return embedder


@pytest.fixture(scope="module")
def shared_embedder(minilm):
    """Banks opened during a module embed with the shared MiniLM instead of loading their own."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SentenceTransformerEmbedding, "from_config", classmethod(lambda cls, config: minilm))
        yield minilm


def add_rule(home: Path, embedder) -> None:
    """A rule for keyroom, as a reflector would write it (so the next run's prompts show it)."""
    from crl.memory.bank import ExperienceBank

    bank = ExperienceBank(home / "memory", runs_dir=home / "runs", embedder=embedder)
    try:
        bank.add_rule(RULE_TEXT, scope="keyroom", model="scripted", actor="reflector")
    finally:
        bank.close()


@pytest.fixture(scope="session")
def studio_built(tmp_path_factory, minilm) -> Path:
    """The data directory (`<root>/.crl`) after the runs, with a rule, adapters and results."""
    root = tmp_path_factory.mktemp("studio")
    home = root / ".crl"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SentenceTransformerEmbedding, "from_config", classmethod(lambda cls, config: minilm))
        mp.chdir(root)
        seeds = fold_seeds("keyroom/key", "train", N_SOLVED)
        solver = ScriptedModel([f" {a}" for s in seeds for a in solve(s, "key")])
        mp.setattr(crl.agent.app, "build_chat_model", lambda settings: solver)
        r = invoke("--home", home, "run", "keyroom/key", "-n", N_SOLVED, "--parallel", "1")
        assert r.exit_code == 0, r.output
        add_rule(home, minilm)
        time.sleep(1.1)  # run ids are per second
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
            3,
            "--policy",
            "llm",
        )
        assert r.exit_code == 0, r.output
    registry = AdapterRegistry(home / "adapters")
    register_fake(registry, root, "sft-1")
    register_fake(registry, root, "sft-2", parent="sft-1")
    registry.record_gate(
        "sft-2",
        GateRecord(
            time=time.time(),
            promoted=True,
            reason="better on dev (paired)",
            candidate_rate=0.5,
            current=None,
            current_rate=0.25,
            margin=0.0,
            rule="better (paired)",
            alpha=0.05,
            p_value=0.031,
        ),
    )
    registry.promote("sft-1", reason="test", actor="user")
    results = root / "results" / "keyroom-key"
    results.mkdir(parents=True)
    shutil.copy(REPO / "docs" / "results" / "keyroom-key" / "results.json", results / "results.json")
    return home


@pytest.fixture
def studio_home(studio_built, shared_embedder, tmp_path, monkeypatch) -> Path:
    """A private copy of the built data directory, selected by $CRL_HOME, cwd next to it."""
    home = tmp_path / ".crl"
    shutil.copytree(studio_built, home)
    shutil.copytree(studio_built.parent / "results", tmp_path / "results")
    for lock in ("lock", "lock.owner"):
        (home / "memory" / lock).unlink(missing_ok=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CRL_HOME", str(home))
    monkeypatch.setenv("COLUMNS", "250")
    return home


def running_copy(source: Path, home: Path) -> tuple[Path, list[dict]]:
    """A copy of the run in `source` that says it is running (run id `20990101-000000-live`), with an
    empty log: returns its folder and its log's lines (ids renamed), to append as the test goes."""
    live = home / "runs" / "20990101-000000-live"
    live.mkdir()
    info = json.loads((source / "run.json").read_text()) | {
        "run_id": live.name,
        "status": "running",
        "finished_at": None,
    }
    (live / "run.json").write_text(json.dumps(info))
    lines = [json.loads(line) for line in (source / "episodes.jsonl").read_text().splitlines()]
    for line in lines:
        for key in ("episode_id", "run_id"):
            if key in line:
                line[key] = line[key].replace(source.name, live.name)
    return live, lines


def ok(response, status: int = 200):
    """The JSON of a studio response that must have `status`."""
    assert response.status_code == status, response.text
    return response.json()


def memory_rows(client, **params) -> list[dict]:
    """The rows of one 200-record page of `/api/memories` with these filters."""
    return ok(client.get("/api/memories", params=params | {"per_page": 200}))["rows"]


def cli_json(*args):
    """What `crl ARGS --json` printed, parsed (it must succeed)."""
    r = invoke(*args, "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)
