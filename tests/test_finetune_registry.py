"""The adapter registry, the promotion gate and the scheduler, with stand-ins for training and evaluation."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import pytest

from crl.finetune.config import FinetuneConfig
from crl.finetune.gate import GateError, TaskScore, decide, decide_margin, decide_paired, run_gate
from crl.finetune.registry import (
    AdapterNotFoundError,
    AdapterRegistry,
    adapter_folder,
    base_model_key,
    promoted_adapter_path,
)
from crl.finetune.rounds import FinetuneContext
from tests.finetune_fixtures import fake_trained, register_fake, tiny_dataset

BASE = "smollm2-135m-instruct"


@pytest.fixture
def registry(tmp_path) -> AdapterRegistry:
    return AdapterRegistry(tmp_path / "home" / "adapters")


def test_register_records_lineage_and_copies_the_adapter(registry, tmp_path):
    lineage = register_fake(registry, tmp_path, "sft-1")
    assert lineage.base_model == BASE and lineage.dataset.examples == 1 and lineage.parent is None
    assert len(lineage.dataset.sha256) == 64 and lineage.dataset.tasks == ["keyroom/key"]
    assert "log_history" not in lineage.metrics and lineage.config == {"lora_rank": 4}
    assert (registry.adapter_dir("sft-1") / "adapter_model.safetensors").read_bytes() == b"weights"
    assert registry.card("sft-1").source_episode_ids == ["ep:keyroom:r-0000"]
    child = register_fake(registry, tmp_path, "dpo-1", parent="sft-1", kind="dpo")
    assert registry.get("dpo").parent == "sft-1" and child.kind == "dpo"
    assert [a.id for a in registry.ls()] == ["sft-1", "dpo-1"]
    with pytest.raises(ValueError, match="already registered"):
        registry.register(
            "sft-1", "sft", fake_trained(tmp_path, "again"), BASE, "/m", tiny_dataset(tmp_path, "x"), {}, {}
        )
    with pytest.raises(AdapterNotFoundError):
        registry.get("nope")


def test_adapter_option_takes_a_folder_or_a_registered_id_or_prefix(registry, tmp_path):
    register_fake(registry, tmp_path, "sft-20261205-0333-aaaa")
    register_fake(registry, tmp_path, "sft-20261205-0400-bbbb")
    home = registry.root.parent
    inner = registry.adapter_dir("sft-20261205-0333-aaaa")
    (inner / "adapter_config.json").write_text("{}")
    assert adapter_folder(home, "sft-20261205-0333-aaaa") == inner
    assert adapter_folder(home, "sft-20261205-04") == registry.adapter_dir("sft-20261205-0400-bbbb")
    assert adapter_folder(home, str(inner)) == inner
    assert adapter_folder(home, str(inner.parent)) == inner  # a registered adapter's own folder
    assert adapter_folder(home, "sft-2026") == Path("sft-2026")  # ambiguous: left for the loader to report
    assert adapter_folder(home, "nope") == Path("nope")
    assert adapter_folder(home, "some/missing/folder") == Path("some/missing/folder")


def test_promote_and_rollback_restore_the_previous_adapter(registry, tmp_path):
    for i in (1, 2, 3):
        register_fake(registry, tmp_path, f"sft-{i}")
    home = registry.root.parent
    assert registry.promoted(BASE) is None and promoted_adapter_path(home, None) is None
    registry.promote("sft-1")
    registry.promote("sft-2")
    assert promoted_adapter_path(home, None) == registry.adapter_dir("sft-2")
    with pytest.raises(ValueError, match="already the promoted"):
        registry.promote("sft-2")
    entry = registry.rollback(BASE)
    assert (entry.previous, entry.adapter) == ("sft-2", "sft-1") and registry.promoted(BASE) == "sft-1"
    registry.promote("sft-3")
    registry.rollback(BASE)
    registry.rollback(BASE)
    assert registry.promoted(BASE) is None
    with pytest.raises(ValueError, match="nothing to roll back"):
        registry.rollback(BASE)
    assert [p.op for p in registry.promotions()] == [
        "promote",
        "promote",
        "rollback",
        "promote",
        "rollback",
        "rollback",
    ]


def test_rm_refuses_adapters_a_rollback_could_restore(registry, tmp_path):
    register_fake(registry, tmp_path, "sft-1")
    register_fake(registry, tmp_path, "sft-2")
    registry.promote("sft-1")
    registry.promote("sft-2")
    with pytest.raises(ValueError, match="roll back past it"):
        registry.rm("sft-1")
    registry.rollback(BASE)
    assert registry.rm("sft-2") == "sft-2" and not registry.path("sft-2").exists()


def test_serve_args_name_each_adapter_for_vllm(registry, tmp_path):
    from crl.finetune.serving import lora_args

    register_fake(registry, tmp_path, "sft-1")
    with pytest.raises(ValueError, match="no adapter is promoted"):
        lora_args(registry, BASE)
    registry.promote("sft-1")
    args = lora_args(registry, BASE)
    assert args[:3] == ["--enable-lora", "--max-lora-rank", "8"]
    assert args[3] == "--lora-modules" and args[4] == f"sft-1={registry.adapter_dir('sft-1').resolve()}"
    assert base_model_key(None) == BASE and base_model_key("org/model") == "org/model"


# ---- the gate --------------------------------------------------------------------------------


class FakeEvaluator:
    """Success counts per adapter folder name (None: the base model); seeds 0..k-1 are the successes."""

    def __init__(self, rates: dict[str | None, int], per_seed: bool = True):
        self.rates = rates
        self.per_seed = per_seed
        self.calls: list[tuple[str | None, tuple[str, ...], int]] = []

    def __call__(self, adapter, tasks, episodes):
        name = adapter.parent.name if adapter else None
        self.calls.append((name, tuple(tasks), episodes))
        wins = self.rates[name]
        outcomes = {seed: seed < wins for seed in range(episodes)} if self.per_seed else {}
        return [TaskScore(t, wins, episodes, run_id=f"run-{name}", outcomes=outcomes) for t in tasks]


def test_gate_promotes_a_candidate_not_worse_than_the_current_one(registry, tmp_path):
    register_fake(registry, tmp_path, "sft-1")
    config = FinetuneConfig(gate_episodes=10)
    evaluator = FakeEvaluator({None: 2, "sft-1": 5})
    decision = run_gate(registry, "sft-1", evaluator, config)
    assert decision.promoted and decision.current is None
    assert (decision.candidate_rate, decision.current_rate) == (0.5, 0.2)
    assert decision.tasks["keyroom/key"]["candidate"] == [5, 10]
    assert "3 seeds won, 0 lost of 10 paired" in decision.reason and "McNemar p = 1" in decision.reason
    assert evaluator.calls == [("sft-1", ("keyroom/key",), 10), (None, ("keyroom/key",), 10)]
    assert registry.promoted(BASE) == "sft-1" and registry.get("sft-1").gate[0].promoted
    assert "gate:" in registry.promotions()[-1].reason


def test_gate_refuses_a_significantly_worse_candidate_and_records_why(registry, tmp_path):
    register_fake(registry, tmp_path, "sft-1")
    register_fake(registry, tmp_path, "sft-2")
    registry.promote("sft-1")
    config = FinetuneConfig(gate_episodes=10)
    decision = run_gate(registry, "sft-2", FakeEvaluator({"sft-1": 9, "sft-2": 2}), config)
    # 7 seeds lost, none won: one-sided p = 0.5 ** 7
    assert not decision.promoted and decision.current == "sft-1"
    assert "significantly worse (0 seeds won, 7 lost" in decision.reason and "p = 0.00781" in decision.reason
    assert registry.promoted(BASE) == "sft-1" and registry.get("sft-2").gate[-1].current_rate == 0.9
    # two seeds lost, none won (p = 0.25) is not evidence of a worse adapter
    assert run_gate(registry, "sft-2", FakeEvaluator({"sft-1": 6, "sft-2": 4}), config).promoted
    assert registry.promoted(BASE) == "sft-2" and len(registry.get("sft-2").gate) == 2


def test_margin_rule_keeps_the_former_semantics(registry, tmp_path):
    register_fake(registry, tmp_path, "sft-1")
    register_fake(registry, tmp_path, "sft-2")
    registry.promote("sft-1")
    strict = FinetuneConfig(gate_episodes=10, gate_rule="margin")
    unpaired = FakeEvaluator({"sft-1": 6, "sft-2": 4}, per_seed=False)
    refused = run_gate(registry, "sft-2", unpaired, strict)
    assert not refused.promoted and refused.reason == "candidate 40.0% < current 60.0% - margin 0.0%"
    lenient = strict.model_copy(update={"gate_margin": 0.2})
    assert run_gate(registry, "sft-2", unpaired, lenient).promoted


def test_better_rule_needs_a_significant_gain(registry, tmp_path):
    register_fake(registry, tmp_path, "sft-1")
    config = FinetuneConfig(gate_episodes=10, gate_rule="better", gate_alpha=0.05)
    assert not run_gate(registry, "sft-1", FakeEvaluator({None: 2, "sft-1": 5}), config).promoted  # p = 1/8
    assert run_gate(registry, "sft-1", FakeEvaluator({None: 0, "sft-1": 5}), config).promoted  # p = 1/32


def test_paired_rules_refuse_to_guess_without_per_seed_outcomes(registry, tmp_path):
    register_fake(registry, tmp_path, "sft-1")
    with pytest.raises(GateError, match="gate_rule = 'margin'"):
        run_gate(registry, "sft-1", FakeEvaluator({None: 2, "sft-1": 5}, per_seed=False), FinetuneConfig())
    assert registry.get("sft-1").gate == [] and registry.promoted(BASE) is None


def test_decide_pools_tasks_and_treats_equal_as_not_worse():
    margin = FinetuneConfig(gate_rule="margin")
    assert decide(
        [TaskScore("a", 1, 2), TaskScore("b", 1, 2)], [TaskScore("a", 2, 2), TaskScore("b", 0, 2)], margin
    ).passed
    assert not decide_margin([TaskScore("a", 0, 2)], [TaskScore("a", 1, 2)], 0.0).passed


def test_paired_decision_uses_only_seeds_both_sides_played():
    candidate = [TaskScore("a", 2, 3, outcomes={0: True, 1: True, 9: True}), TaskScore("b", 0, 1, outcomes={0: False})]
    current = [TaskScore("a", 0, 2, outcomes={0: False, 1: False}), TaskScore("b", 1, 1, outcomes={0: True})]
    decision = decide_paired(candidate, current, "better", 0.05)
    assert (decision.candidate_only, decision.current_only, decision.pairs) == (2, 1, 3)
    assert decision.p_value == pytest.approx(0.5)  # P(X >= 2), X ~ Binomial(3, 1/2)


# ---- the scheduler ---------------------------------------------------------------------------


class FakeBank:
    def __init__(self, records):
        self.records = records
        self.runs_dir = None

    def ls(self, kind="episode", family=None, **filters):
        return [r for r in self.records if family is None or r.family == family] if kind == "episode" else []


def _record(i: int, success: bool = True, created_at: float = 100.0):
    from crl.memory.records import EpisodeRecord

    return EpisodeRecord(
        id=f"ep:keyroom:r-{i:04d}",
        episode_id=f"r-{i:04d}",
        run_id="r",
        task="keyroom/key",
        family="keyroom",
        variant="key",
        seed=i,
        goal="g",
        status="done",
        outcome="success" if success else "failure",
        success=success,
        verified=True,
        verified_by="env",
        total_return=float(success),
        length=2,
        reward_sparsity=0.5,
        novelty=0.5,
        text="t",
        created_at=created_at + i,
        updated_at=created_at + i,
        value=0.7 if success else 0.1,
    )


def _context(tmp_path, records, **config) -> FinetuneContext:
    @contextmanager
    def opener():
        yield FakeBank(records)

    return FinetuneContext(
        home=tmp_path / "home",
        config=FinetuneConfig(**config),
        base_model=BASE,
        base_model_path=tmp_path,
        open_bank=opener,
        evaluator=None,
        progress=False,
    )


def test_scheduler_waits_for_enough_new_qualifying_episodes(tmp_path, monkeypatch):
    from crl.finetune import scheduler

    records = [_record(i) for i in range(3)] + [_record(10 + i, success=False) for i in range(5)]
    ctx = _context(tmp_path, records, auto_min_new_episodes=3)
    seen, ran = scheduler.maybe_run_round(_context(tmp_path, records[:2] + records[3:], auto_min_new_episodes=3))
    assert (seen.new_episodes, ran) == (2, None) and scheduler.read_rounds(ctx.home) == []

    calls = []

    def fake_dataset(ctx, kind, family=None, tasks=None, out_dir=None):
        calls.append(("build", kind))
        return tiny_dataset(tmp_path, f"ds-{len(calls)}")

    def fake_train(ctx, kind, dataset_dir, from_adapter=None, **kw):
        calls.append(("train", kind, from_adapter))
        registry = ctx.registry
        return None, register_fake(registry, tmp_path, f"{kind}-{len(calls)}")

    monkeypatch.setattr(scheduler, "make_dataset", fake_dataset)
    monkeypatch.setattr(scheduler, "train_and_register", fake_train)
    seen, record = scheduler.maybe_run_round(ctx)
    assert seen.new_episodes == 3 and record.status == "trained" and record.round == 1
    assert calls == [("build", "sft"), ("train", "sft", None)]
    assert scheduler.read_rounds(ctx.home)[0].steps[0]["adapter"] == "sft-2"
    again, none = scheduler.maybe_run_round(ctx)
    assert again.new_episodes == 0 and none is None, "the same episodes do not start a second round"


def test_a_failed_round_is_logged_and_leaves_its_episodes_for_the_next(tmp_path, monkeypatch):
    from crl.finetune import scheduler

    ctx = _context(tmp_path, [_record(i) for i in range(2)], auto_min_new_episodes=2)

    def broken(*args, **kwargs):
        raise ValueError("no sft examples qualify")

    monkeypatch.setattr(scheduler, "make_dataset", broken)
    _, record = scheduler.maybe_run_round(ctx)
    assert record.status == "failed" and "no sft examples" in record.error
    assert scheduler.check(ctx).due
