"""`crl memory quarantine --malicious`: the records are quarantined and marked in the journal (the mark
survives a rebuild, a release clears it), and what they contaminated is reported: rules whose journal
names them in its provenance, adapters whose datasets included them or that continued from such an
adapter. `crl adapters ls` / `show` flag those adapters, computed from the journal at each call.

The bank is filled by scripted keyroom runs and embeds with the hashing embedder (no model); datasets
are built from it for real, adapters registered with fake weights.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crl.agent.app import start_run
from crl.agent.cli.main import app
from crl.agent.config import load_settings
from crl.agent.contamination_view import contamination_report
from crl.agent.llm.scripted import ScriptedModel
from crl.finetune.build import build_dataset
from crl.finetune.config import FinetuneConfig
from crl.finetune.contamination import adapter_taints, home_marks, marked_sources
from crl.finetune.dataset_card import read_card, write_dataset
from crl.finetune.registry import AdapterRegistry, promoted_adapter_path
from crl.finetune.sft_data import BuiltDataset
from crl.memory.contamination import MALICIOUS, is_marked, read_marks
from crl.memory.synthesis.bank_io import store_synthetic
from crl.memory.synthesis.provenance import SYNTHESIS_RUN_ID
from crl.memory.trajectory import Episode
from crl.tasks.keyroom import solve
from crl.tasks.registry import fold_seeds
from tests.finetune_fixtures import BASE, copy_home, fake_trained, fill_bank, open_bank


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> Path:
    return fill_bank(tmp_path_factory.mktemp("contamination") / "home")


@pytest.fixture
def home(filled, tmp_path) -> Path:
    return copy_home(filled, tmp_path / "home")


def register(registry: AdapterRegistry, tmp_path: Path, adapter_id: str, dataset: Path, parent: str | None = None):
    return registry.register(
        adapter_id, "sft", fake_trained(tmp_path, adapter_id), BASE, "/models/base", dataset, {"lora_rank": 4}, {},
        parent=parent,
    )  # fmt: skip


def setup_lineage(home: Path, tmp_path: Path):
    """Rules traced to two successes (E, F), one unrelated rule, and three adapters: `sft-a` trained on a
    dataset holding E, `dpo-b` continued from it on E-free data, `sft-c` on keyroom/door data only."""
    bank = open_bank(home)
    try:
        successes = [r for r in bank.ls("episode", family="keyroom", variant="key") if r.outcome == "success"]
        failures = [r for r in bank.ls("episode") if r.outcome == "failure"]
        e, f = successes[0].id, successes[1].id
        rule_e = bank.add_rule("Take the key before the door.", "keyroom", provenance=[e], actor="reflector")
        rule_f = bank.add_rule("Look around first.", "keyroom", provenance=[f], actor="reflector")
        bank.vote_rule(rule_f, +1, provenance=[e], actor="reflector")
        unrelated = bank.add_rule("Doors open with keys.", "keyroom", provenance=[failures[0].id], actor="reflector")
        config = FinetuneConfig(near_duplicate_similarity=None)
        card_a = build_dataset("sft", bank, config, tmp_path / "ds-a", tasks=["keyroom/key"])
        card_c = build_dataset("sft", bank, config, tmp_path / "ds-c", tasks=["keyroom/door"])
    finally:
        bank.close()
    assert e in card_a.source_episode_ids and e not in card_c.source_episode_ids
    assert card_a.namespace == "crl"
    clean = BuiltDataset("sft", [], source_episode_ids=[f], source_step_ids=[])
    clean.rows = [
        {"prompt": [{"role": "user", "content": "U"}], "completion": [{"role": "assistant", "content": "Action: look"}],
         "task": "keyroom/key", "episode_id": f, "step_id": f.replace("ep:", "st:") + ":0"}
    ]  # fmt: skip
    write_dataset(tmp_path / "ds-b", clean, {}, namespace="crl")
    registry = AdapterRegistry.of(home)
    register(registry, tmp_path, "sft-a", tmp_path / "ds-a")
    register(registry, tmp_path, "dpo-b", tmp_path / "ds-b", parent="sft-a")
    register(registry, tmp_path, "sft-c", tmp_path / "ds-c")
    return e, f, {"e": rule_e, "f": rule_f, "unrelated": unrelated}, registry


def test_malicious_quarantine_reports_rules_and_adapters_and_the_mark_survives_rebuild(home, tmp_path):
    e, f, rules, registry = setup_lineage(home, tmp_path)
    assert registry.get("sft-a").namespace == "crl"
    bank = open_bank(home)
    try:
        report = bank.quarantine_malicious([e], reason="forged success")
        assert report.ids == [e]
        derived = {r.id: r for r in report.rules}
        assert set(derived) == {rules["e"], rules["f"]}  # the unrelated rule names no malicious episode
        assert derived[rules["e"]].how == ["created"] and derived[rules["f"]].how == ["upvoted"]
        assert derived[rules["f"]].sources == [e] and derived[rules["f"]].tier == "regular"
        # the episode and its steps are quarantined; the rules are not (no --with-rules)
        assert bank.get(e).tier == "quarantine"
        assert all(s.tier == "quarantine" for s in bank.ls("step") if s.id.startswith(e.replace("ep:", "st:") + ":"))
        assert {r.id for r in bank.rules()} >= set(rules.values())
        marks = bank.malicious()
        assert set(marks) == {e} and marks[e].reason == "forged success"

        data = contamination_report(bank, report, registry)
        adapters = {a["adapter"]: a for a in data["adapters"]}
        assert set(adapters) == {"sft-a", "dpo-b"}  # sft-c was trained on keyroom/door only
        assert adapters["sft-a"]["records"] == [e] and adapters["sft-a"]["via"] is None
        assert adapters["dpo-b"]["records"] == [] and adapters["dpo-b"]["via"] == "sft-a"

        bank.rebuild()
        assert set(bank.malicious()) == {e} and bank.get(e).tier == "quarantine"

        again = bank.quarantine_malicious([e], with_rules=True)
        assert sorted(again.rules_quarantined) == sorted([rules["e"], rules["f"]])
        assert {r.id for r in bank.rules()} == {rules["unrelated"]}
        assert {r.id for r in bank.rules(include_quarantine=True)} >= set(rules.values())
    finally:
        bank.close()
    # the marks are read straight from the journal, without the store lock
    assert e in read_marks(home / "memory", "crl") and e in read_marks(home / "memory", None)
    taints = adapter_taints(registry, home_marks(home / "memory"))
    assert taints["sft-a"].records == [e] and taints["dpo-b"].via == "sft-a" and not taints["sft-c"].contaminated

    bank = open_bank(home)
    try:
        bank.release([e])  # a curator's release clears the mark: the adapters are no longer flagged
        assert e not in bank.malicious()
    finally:
        bank.close()
    taints = adapter_taints(registry, home_marks(home / "memory"))
    assert not any(t.contaminated for t in taints.values())


def test_marks_of_one_namespace_never_flag_an_adapter_of_another(home, tmp_path):
    e, _, _, registry = setup_lineage(home, tmp_path)
    card = read_card(tmp_path / "ds-a")
    built = BuiltDataset("sft", [{"task": "keyroom/key", "prompt": [], "completion": []}])
    built.source_episode_ids = card.source_episode_ids
    write_dataset(tmp_path / "ds-bob", built, {}, namespace="bob")  # the same ids, in namespace bob
    register(registry, tmp_path, "sft-bob", tmp_path / "ds-bob")
    bank = open_bank(home)
    try:
        bank.quarantine_malicious([e])
    finally:
        bank.close()
    taints = adapter_taints(registry, home_marks(home / "memory"))
    assert taints["sft-a"].records == [e] and taints["sft-bob"].namespace == "bob"
    assert not taints["sft-bob"].contaminated


def test_marks_cover_an_episodes_steps_and_name_the_record():
    marked = {"ep:keyroom:r-1"}
    assert is_marked("st:keyroom:r-1:3", marked) and not is_marked("st:keyroom:r-10:3", marked)
    assert not is_marked("ep:keyroom:r-2", marked)
    assert marked_sources(["st:keyroom:r-1:0", "st:keyroom:r-1:1", "st:keyroom:r-2:0"], marked) == ["ep:keyroom:r-1"]


def invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_quarantine_malicious_and_adapters_through_the_cli(home, tmp_path, monkeypatch):
    e, _, rules, _ = setup_lineage(home, tmp_path)
    monkeypatch.setenv("CRL_HOME", str(home))
    monkeypatch.setenv("CRL_MEMORY__EMBEDDING_MODEL", "hashing:64")
    monkeypatch.setenv("COLUMNS", "200")

    refused = invoke("memory", "quarantine", e, "--with-rules")
    assert refused.exit_code == 1 and "go with --malicious" in refused.stderr

    table = invoke("memory", "quarantine", "--malicious", e, "--reason", "forged")
    assert table.exit_code == 0, table.output
    text = " ".join(table.stdout.split())
    assert "marked malicious" in text and "contaminated by them: 4" in text
    assert "sft-a" in text and "dpo-b" in text and "continued from sft-a" in text and "sft-c" not in text
    assert "--with-rules" in text  # the derived rules are still in prompts: the way out is offered

    data = json.loads(invoke("memory", "quarantine", "--malicious", e, "--with-rules", "--json").stdout)
    assert data["marked"] == [e] and sorted(data["rules_quarantined"]) == sorted([rules["e"], rules["f"]])
    assert {a["adapter"] for a in data["adapters"]} == {"sft-a", "dpo-b"}
    history = json.loads(invoke("memory", "history", e, "--json").stdout)
    assert any(h.get("op") == "tier" and MALICIOUS in json.dumps(h) for h in history)

    rows = {r["id"]: r for r in json.loads(invoke("adapters", "ls", "--json").stdout)}
    assert rows["sft-a"]["malicious_sources"] == [e] and rows["sft-a"]["namespace"] == "crl"
    assert rows["dpo-b"]["malicious_via"] == "sft-a" and rows["sft-c"]["contaminated"] is False
    listed = " ".join(invoke("adapters", "ls").stdout.split())
    assert "trained on 1 malicious record(s)" in listed and "parent sft-a trained on malicious data" in listed
    only = json.loads(invoke("adapters", "ls", "--contaminated", "--json").stdout)
    assert sorted(r["id"] for r in only) == ["dpo-b", "sft-a"]
    shown = invoke("adapters", "show", "sft-a")
    assert e in " ".join(shown.stdout.split()) and "marked malicious" in shown.stdout
    assert json.loads(invoke("adapters", "show", "sft-c", "--json").stdout)["malicious_sources"] == []


def test_a_malicious_memory_retrieved_into_training_prompts_contaminates_the_adapter(tmp_path):
    """A failure is no SFT row, but retrieved into the prompts of later successes (kept as logged,
    `memory_prompts = keep`) it is trained on all the same."""
    home = tmp_path / "home"
    settings = load_settings(
        {
            "home": str(home),
            # loop breaker off: the looking model looks every step and fails (the breaker's random
            # replacement of a second look could take the key)
            "agent": {"policy": "llm", "reply_format": "action", "parallel": 1, "max_steps": 4, "loop_breaker": False},
            "memory": {"embedding_model": "hashing:64"},
            "reflect": {"enabled": False},
        }
    )
    looked = start_run(settings, "keyroom/key", 2, model=ScriptedModel(lambda messages: " look"))
    failures = [f"ep:keyroom:{e.episode_id}" for e in looked.episodes]
    seeds = fold_seeds("keyroom/key", "train", 2, 2)
    start_run(
        settings, "keyroom/key", 2, seed_start=2, model=ScriptedModel([" " + a for s in seeds for a in solve(s, "key")])
    )
    bank = open_bank(home)
    try:
        card = build_dataset("sft", bank, FinetuneConfig(near_duplicate_similarity=None), tmp_path / "ds")
        shown = [f for f in failures if marked_sources(card.prompt_memory_ids, {f})]  # the episode or a step of it
        assert shown and not set(failures) & set(card.source_episode_ids)
        failure = shown[0]
        stripped = build_dataset(
            "sft", bank, FinetuneConfig(near_duplicate_similarity=None, memory_prompts="strip"), tmp_path / "strip"
        )
        assert stripped.prompt_memory_ids == []  # prompts rebuilt without their memory section
        registry = AdapterRegistry.of(home)
        register(registry, tmp_path, "sft-kept", tmp_path / "ds")
        register(registry, tmp_path, "sft-stripped", tmp_path / "strip")
        report = bank.quarantine_malicious([failure])
        adapters = {a["adapter"]: a for a in contamination_report(bank, report, registry)["adapters"]}
    finally:
        bank.close()
    assert set(adapters) == {"sft-kept"} and adapters["sft-kept"]["prompted"] == [failure]
    taints = adapter_taints(registry, home_marks(home / "memory"))
    assert taints["sft-kept"].prompted == [failure] and not taints["sft-kept"].records
    assert not taints["sft-stripped"].contaminated


def test_a_promoted_adapter_of_another_namespace_plays_with_a_warning(tmp_path, caplog):
    """Promotions are the home's: the adapter loads for every namespace, and one that learned from
    another namespace's memory is named in a warning."""
    registry = AdapterRegistry.of(tmp_path)
    built = BuiltDataset("sft", [{"task": "keyroom/key", "prompt": [], "completion": []}])
    write_dataset(tmp_path / "ds", built, {}, namespace="bob")
    register(registry, tmp_path, "sft-bob", tmp_path / "ds")
    registry.promote("sft-bob")
    assert registry.get("sft-bob").namespace == "bob"
    for ns, warned in (("bob", False), ("alice", True)):
        caplog.clear()
        settings = load_settings({"home": str(tmp_path), "memory": {"namespace": ns}})
        with caplog.at_level("WARNING", logger="crl.finetune.registry"):
            assert promoted_adapter_path(settings, None) == registry.adapter_dir("sft-bob")
        assert ("learned from memory namespace 'bob'" in caplog.text) is warned


def test_synthetic_episodes_made_from_a_malicious_record_are_reported_and_quarantined_with_it(home, tmp_path):
    bank = open_bank(home)
    try:
        e = next(r for r in bank.ls("episode", family="keyroom", variant="key") if r.outcome == "success")
        parent = bank.get(e.id).to_episode()
        child = Episode.from_dict(parent.to_dict() | {"episode_id": "syn-stitch-from-e", "run_id": SYNTHESIS_RUN_ID})
        child.source = "synthetic"
        child.provenance = {"kind": "stitch", "parents": [parent.episode_id], "validation": {"replayed": True}}
        other = Episode.from_dict(child.to_dict() | {"episode_id": "syn-stitch-other"})
        other.provenance = {"kind": "stitch", "parents": ["somebody-else-0001"]}
        store_synthetic(bank, [child, other])
        report = bank.quarantine_malicious([e.id])
        syn = "ep:keyroom:syn-stitch-from-e"
        assert report.synthetic == [{"id": syn, "parents": [e.id], "quarantined": False}]
        assert bank.get(syn).tier != "quarantine" and syn not in bank.malicious()
        again = bank.quarantine_malicious([e.id], with_synthetic=True)
        assert again.synthetic_quarantined == [syn] and bank.get(syn).tier == "quarantine"
        assert syn in bank.malicious() and "ep:keyroom:syn-stitch-other" not in bank.malicious()
    finally:
        bank.close()
