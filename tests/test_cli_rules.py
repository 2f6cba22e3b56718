"""`crl reflect` and `crl memory rules ...` end to end through the real CLI: a bank filled by
`crl run` with scripted models (two solved games, one failed), a scripted reflecting model,
embedded mode with the hashing embedding (fast; the embedder is not what is tested here).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import crl.agent.app
import crl.agent.reflect
from crl.agent.cli.main import app
from crl.agent.llm.scripted import ScriptedModel
from crl.memory.storage.embeddings import HashingEmbedding, SentenceTransformerEmbedding
from crl.tasks.keyroom import solve
from crl.tasks.registry import fold_seeds

RULE = "Take the key before you try the door."


def invoke(home: Path, *args: str):
    return CliRunner().invoke(app, ["--home", str(home), *[str(a) for a in args]])


def ok(result) -> str:
    assert result.exit_code == 0, result.output
    return result.stdout


@pytest.fixture(scope="module", autouse=True)
def hashing_embedder():
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(SentenceTransformerEmbedding, "from_config", classmethod(lambda cls, config: HashingEmbedding(128)))
        yield


@pytest.fixture(scope="module")
def built_home(tmp_path_factory) -> Path:
    """Two solved keyroom/key games, then a failed retry of the first."""
    root = tmp_path_factory.mktemp("rules-cli")
    home = root / ".crl"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        seeds = fold_seeds("keyroom/key", "train", 2)
        solver = ScriptedModel([f" {a}" for s in seeds for a in solve(s, "key")])
        mp.setattr(crl.agent.app, "build_chat_model", lambda settings: solver)
        ok(invoke(home, "run", "keyroom/key", "-n", 2, "--parallel", 1, "--policy", "llm"))
        mp.setattr(crl.agent.app, "build_chat_model", lambda settings: ScriptedModel(lambda m: " look"))
        ok(invoke(home, "run", "keyroom/key", "-n", 1, "--max-steps", 3, "--policy", "llm"))
    return home


@pytest.fixture
def home(built_home, tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    copy = tmp_path / ".crl"
    shutil.copytree(built_home, copy)
    return copy


def use_model(monkeypatch, model) -> list:
    """Make `crl reflect` reflect with `model`; returns the settings each build was asked for."""
    built = []

    def build(settings):
        built.append(settings)
        return model

    monkeypatch.setattr(crl.agent.reflect, "build_chat_model", build)
    return built


def rules_json(home: Path, *args: str) -> list[dict]:
    return json.loads(ok(invoke(home, "memory", "rules", "ls", "--json", *args)))


def test_reflect_reports_and_the_rules_list_shows_the_result(home, monkeypatch):
    model = ScriptedModel(lambda messages: f"ADD: {RULE}\nAGREE 9", supports_prefill=False)
    use_model(monkeypatch, model)
    report = json.loads(ok(invoke(home, "reflect", "--family", "keyroom", "--json")))
    assert [o["input"]["kind"] for o in report["outcomes"]] == ["pair", "group"]
    assert (report["accepted"], report["rejected"], report["errors"]) == (2, 2, [])
    assert report["outcomes"][1]["accepted"][0]["note"].endswith("counted as AGREE on it")
    (rule,) = rules_json(home)
    assert (rule["text"], rule["score"], rule["model"], rule["scope_label"], rule["pinned"]) == (
        RULE,
        3.0,
        "scripted",
        "keyroom",
        False,
    )
    assert rule["reflections"] == [report["id"]] and len(rule["provenance"]) == 3  # the pair and the other success
    table = ok(invoke(home, "memory", "rules", "ls"))
    assert "Take the key before you" in table and "scripted" in table
    again = ok(invoke(home, "reflect"))
    assert "nothing to reflect on" in again and len(model.calls) == 1  # one batch, then nothing new


def test_reflect_text_output_lists_changes_and_rejections(home, monkeypatch):
    use_model(monkeypatch, ScriptedModel(lambda messages: f"ADD: {RULE}\nEDIT 7: nothing", supports_prefill=False))
    r = invoke(home, "reflect")
    assert r.exit_code == 0, r.output
    assert "2 input(s), 2 operation(s) accepted, 2 rejected" in r.stdout and "rule changes" in r.stdout
    assert "no rule 7 in the list" in r.stderr


def test_a_failing_reflecting_model_exits_1_and_leaves_the_work_for_later(home, monkeypatch):
    use_model(monkeypatch, ScriptedModel([], supports_prefill=False))
    r = invoke(home, "reflect")
    assert r.exit_code == 1 and "ran out of replies" in r.stderr
    use_model(monkeypatch, ScriptedModel(lambda messages: f"ADD: {RULE}", supports_prefill=False))
    assert json.loads(ok(invoke(home, "reflect", "--json")))["inputs"] == 2


def test_reflect_model_flag_builds_another_model_without_the_adapter(home, monkeypatch):
    built = use_model(monkeypatch, ScriptedModel(lambda messages: "AGREE 1", supports_prefill=False))
    ok(invoke(home, "reflect", "--reflect-model", "/models/stronger", "--reflect-base-url", "http://127.0.0.1:9/v1"))
    llm = built[0].llm
    assert (llm.model, llm.base_url, llm.adapter, llm.backend) == (
        "/models/stronger",
        "http://127.0.0.1:9/v1",
        None,
        "auto",
    )


def test_show_edit_pin_and_rm_a_rule(home, monkeypatch):
    use_model(monkeypatch, ScriptedModel(lambda messages: f"ADD: {RULE}", supports_prefill=False))
    ok(invoke(home, "reflect"))
    (rule,) = rules_json(home)
    short = rule["id"].rsplit(":", 1)[1][:6]

    shown = ok(invoke(home, "memory", "rules", "show", short))
    assert RULE in shown and "written by" in shown and "rule_add" in shown and "rule_vote" in shown
    detail = json.loads(ok(invoke(home, "memory", "rules", "show", short, "--json")))
    assert [h["op"] for h in detail["history"]] == ["rule_add", "rule_vote"]
    assert len(detail["reflections"]) == 2 and detail["rule"]["id"] == rule["id"]

    ok(invoke(home, "memory", "rules", "edit", short, "Open the door \x00with the key you carry."))
    assert rules_json(home)[0]["text"] == "Open the door with the key you carry."
    bad = invoke(home, "memory", "rules", "edit", short, "   ")
    assert bad.exit_code == 1 and "empty rule text" in bad.stderr

    ok(invoke(home, "memory", "rules", "pin", short))
    assert rules_json(home)[0]["pinned"] is True
    ok(invoke(home, "memory", "rules", "unpin", rule["id"]))
    assert rules_json(home)[0]["pinned"] is False

    missing = invoke(home, "memory", "rules", "rm", "ffffffffff", "--yes")
    assert missing.exit_code == 1 and "no rule 'ffffffffff'" in missing.stderr
    removed = json.loads(ok(invoke(home, "memory", "rules", "rm", short, "--yes", "--json")))
    assert removed == {"action": "removed", "ids": [rule["id"]]}
    assert rules_json(home) == [] and "no rules yet" in ok(invoke(home, "memory", "rules", "ls"))
    history = json.loads(ok(invoke(home, "memory", "history", rule["id"], "--json")))
    assert [h["op"] for h in history][-1] == "rm"
