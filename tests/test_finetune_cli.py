"""`crl dataset`, `crl finetune` and `crl adapters` through the command line (the standalone app mounts them)."""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
from typer.testing import CliRunner

from crl.agent.cli import finetune as cli_finetune
from crl.finetune.gate import TaskScore
from crl.finetune.registry import AdapterRegistry
from tests.finetune_fixtures import fill_bank, open_bank, register_fake

runner = CliRunner()


def crl(*args: str):
    return runner.invoke(cli_finetune.standalone, list(args))


def said(result) -> str:
    """stderr with rich's line wrapping undone."""
    return " ".join(result.stderr.split())


class QuarantineBank:
    def __init__(self, ids):
        self.ids = ids

    def ls(self, kind="episode", tier=None, **filters):
        class R:
            def __init__(self, id):
                self.id = id

        return [R(i) for i in self.ids if (kind == "episode") == i.startswith("ep:")] if tier == "quarantine" else []


@pytest.fixture
def quarantine(monkeypatch):
    ids: list[str] = []

    @contextmanager
    def fake_open_bank(settings, actor=None):
        yield QuarantineBank(ids)

    monkeypatch.setattr("crl.agent.app.open_bank", fake_open_bank)
    return ids


def test_adapters_ls_promote_rollback_rm_and_serve_args(crl_home, tmp_path, quarantine, monkeypatch):
    registry = AdapterRegistry.of(crl_home)
    register_fake(registry, tmp_path, "sft-1")
    register_fake(registry, tmp_path, "sft-2")
    quarantine.append("ep:keyroom:r-0000")  # both fake datasets were built from this episode

    rows = json.loads(crl("adapters", "ls", "--json").stdout)
    assert [r["id"] for r in rows] == ["sft-1", "sft-2"]
    assert all(r["quarantined_sources"] == ["ep:keyroom:r-0000"] for r in rows) and not any(r["promoted"] for r in rows)
    assert "quarantined source" in crl("adapters", "ls").stdout

    forced = crl("adapters", "promote", "sft-1", "--force", "--json")
    assert forced.exit_code == 0 and json.loads(forced.stdout)["promoted"]

    class Evaluator:
        def __call__(self, adapter, tasks, episodes):
            wins = {"sft-1": 1, "sft-2": 2}[adapter.parent.name]
            return [TaskScore(t, wins, 2, outcomes={0: wins >= 1, 1: wins >= 2}) for t in tasks]

    monkeypatch.setattr("crl.agent.finetuning.local_evaluator", lambda settings, base=None, memory=None: Evaluator())
    gated = json.loads(crl("adapters", "promote", "sft-2", "--json").stdout)
    assert gated["promoted"] and gated["current"] == "sft-1" and gated["candidate_rate"] == 1.0
    assert json.loads(crl("adapters", "show", "sft-2", "--json").stdout)["promoted"] is True

    base = tmp_path / "base-checkpoint"
    base.mkdir()
    monkeypatch.setattr("crl.agent.finetuning.base_model_path", lambda settings, base_=None: base)
    served = crl("adapters", "serve-args").stdout.split()
    lora = registry.adapter_dir("sft-2").resolve()
    assert served == [
        "vllm",
        "serve",
        str(base),
        "--enable-lora",
        "--max-lora-rank",
        "8",
        "--lora-modules",
        f"sft-2={lora}",
    ]
    assert crl("adapters", "serve-args", "--args-only").stdout.split() == served[3:]
    assert json.loads(crl("adapters", "serve-args", "sft-1", "--json").stdout)[-1].startswith("sft-1=")

    refused = crl("adapters", "rm", "sft-1")
    assert refused.exit_code == 1 and "roll back past it" in said(refused)
    back = json.loads(crl("adapters", "rollback", "--json").stdout)
    assert (back["previous"], back["adapter"]) == ("sft-2", "sft-1")
    assert crl("adapters", "rm", "sft-2").exit_code == 0
    assert [r["id"] for r in json.loads(crl("adapters", "ls", "--json").stdout)] == ["sft-1"]
    missing = crl("adapters", "show", "nope")
    assert missing.exit_code == 1 and "crl adapters ls" in said(missing)


def test_rounds_and_empty_listings(crl_home):
    assert json.loads(crl("finetune", "rounds", "--json").stdout) == []
    assert json.loads(crl("dataset", "ls", "--json").stdout) == []


@pytest.fixture
def hashing_bank_home(tmp_path_factory, monkeypatch):
    """A filled bank that the CLI opens with the hashing embedder (no MiniLM load)."""
    home = fill_bank(tmp_path_factory.mktemp("cli-bank") / ".crl")

    @contextmanager
    def opener(settings, actor=None):
        bank = open_bank(settings.home)
        try:
            yield bank
        finally:
            bank.close()

    monkeypatch.setattr("crl.agent.app.open_bank", opener)
    return home


@pytest.mark.slow
def test_dataset_build_show_and_ls(hashing_bank_home, embedded_models_dir):
    from crl.agent.llm.embedded import embedded_model_path

    base = str(embedded_model_path(embedded_models_dir))
    home = str(hashing_bank_home)
    built = crl("--home", home, "dataset", "build", "dpo", "--family", "keyroom", "--base", base, "--json")
    assert built.exit_code == 0, built.stderr
    card = json.loads(built.stdout)
    assert card["kind"] == "dpo" and card["examples"] > 0 and card["max_length"] > card["tokens"]["total_max"]
    shown = json.loads(crl("--home", home, "dataset", "show", card["name"][:12], "-n", "2", "--json").stdout)
    assert len(shown["preview"]) == 2 and shown["preview"][0]["chosen"][0]["role"] == "assistant"
    listed = json.loads(crl("--home", home, "dataset", "ls", "--json").stdout)
    assert [d["name"] for d in listed] == [card["name"]]
    table = crl("--home", home, "dataset", "show", card["name"])
    assert "chosen" in table.stdout and "rejected" in table.stdout
    empty = crl("--home", home, "dataset", "build", "sft", "--min-value", "5", "--base", base)
    assert empty.exit_code == 1 and "no sft examples qualify" in said(empty)
