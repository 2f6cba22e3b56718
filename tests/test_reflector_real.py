"""The embedded model reflects for real on two stored keyroom episodes (slow).

Whatever the 135M model writes, the rule store must stay valid: rules that parse, scores
above zero, texts short and printable, within the cap, each traceable to its episodes.
"""

from __future__ import annotations

import pytest

from crl.agent.app import open_bank, start_run
from crl.agent.config import load_settings
from crl.agent.llm.embedded import embedded_model_path
from crl.agent.llm.local import LocalChatModel
from crl.agent.llm.scripted import ScriptedModel
from crl.agent.reflect import reflect_config
from crl.memory.records import RuleRecord
from crl.memory.reflection.reflector import Reflector
from crl.memory.storage.embeddings import SentenceTransformerEmbedding
from crl.tasks.keyroom import solve
from crl.tasks.registry import fold_seeds


@pytest.mark.slow
def test_embedded_model_reflects_on_a_success_and_a_failure(crl_home, embedded_models_dir, monkeypatch):
    embedder = SentenceTransformerEmbedding()
    monkeypatch.setattr(SentenceTransformerEmbedding, "from_config", classmethod(lambda cls, config: embedder))
    settings = load_settings(
        {
            "home": str(crl_home),
            "agent": {"parallel": 1, "policy": "llm", "memory": "off", "max_steps": 3},
            "memory": {"fsync_journal": False},
        }
    )
    seed = fold_seeds("keyroom/key", "train", 1)[0]
    won = start_run(settings, "keyroom/key", 1, model=ScriptedModel([f" {a}" for a in solve(seed, "key")]))
    lost = start_run(settings, "keyroom/key", 1, model=ScriptedModel(lambda messages: " look"))
    assert won.episodes[0].success and not lost.episodes[0].success and lost.episodes[0].seed == seed

    model = LocalChatModel(embedded_model_path(embedded_models_dir))
    bank = open_bank(settings)
    try:
        config = reflect_config(settings).model_copy(update={"max_new_tokens": 80})
        assert config.prime == "ADD: Always"  # the embedded model's reply is started for it
        report = Reflector(bank, model, config).reflect(family="keyroom")
        rules = bank.rules("keyroom", include_quarantine=True)
        histories = {r.id: bank.history(r.id) for r in rules}
    finally:
        bank.close()
        model.close()

    print("\n--- the embedded model replied:\n" + report.outcomes[0].reply)
    print("--- " + report.summary())
    for r in report.outcomes[0].rejected:
        print(f"rejected {r['raw']!r}: {r['reason']}")
    for rule in rules:
        print(f"rule {rule.id} [{rule.scope_label}, score {rule.score:g}, by {rule.model}]: {rule.text}")

    assert [o.input.kind for o in report.outcomes] == ["pair"] and report.errors == []
    pair = report.outcomes[0].input.episode_ids
    added = {c.rule_id for c in report.changes if c.op == "add"}
    deleted = {c.rule_id for c in report.changes if c.op == "delete"}
    assert {r.id for r in rules} == added - deleted  # the store holds exactly what the report says it wrote
    assert len(rules) <= config.max_rules
    for rule in rules:
        RuleRecord.model_validate(rule.model_dump())
        assert 0 < len(rule.text) <= config.max_rule_chars and rule.text.isprintable()
        assert rule.score > 0 and rule.model == "smollm2-135m-instruct"
        assert rule.provenance == pair and rule.reflections == [report.id]
        assert histories[rule.id][0].entry.actor == f"reflect:{report.id}"
