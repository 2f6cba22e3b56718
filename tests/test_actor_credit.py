"""Credit against the actor that used it: actor keys, actor-tagged credit, decay on promotion,
and paired credit on a scripted game where memory helps on some seeds and hurts on others."""

from __future__ import annotations

import json

import pytest

from crl.finetune.registry import ADAPTER_SUBDIR, AdapterRegistry, Promotion
from crl.memory import actors
from crl.memory.actors import actor_key
from crl.memory.records import record_from_dict, utility_of
from crl.memory.retrieval.actor_decay import decay_older_actors
from crl.memory.retrieval.credit import credit_episode
from crl.memory.retrieval.paired_credit import paired_credit, paired_credit_runs, used_memory_ids
from crl.memory.storage.episode_log import EpisodeLog
from crl.memory.tags import NEUTRAL_VALUE, decay_toward, ema_update
from crl.memory.trajectory import Episode, Step, StepExtra
from crl.prompts.report import PromptReport
from tests.retrieval_fixtures import bank, episode, no_default_embedding, open_test_bank  # noqa: F401

BASE = "smollm2-135m-instruct"
OLD = f"{BASE}+sft-1"
NEW = f"{BASE}+sft-2"


def promotion(adapter: str | None, op: str = "promote", t: float = 1_800_000_000.0) -> Promotion:
    return Promotion(op=op, base_model=BASE, adapter=adapter, previous=None, time=t)


def stored(bank, n: int = 3) -> list[str]:
    for i in range(n):
        bank.ingest_episode(episode("r1", i, ["look", "take brass key"], i % 2 == 0))
    return [f"ep:keyroom:r1-{i:04d}" for i in range(n)]


# ---- actor keys --------------------------------------------------------------------------


def test_a_run_and_the_registry_name_the_same_actor(tmp_path):
    run_model, run_adapter = f"{BASE}+sft-2", tmp_path / "adapters" / "sft-2" / ADAPTER_SUBDIR
    assert actor_key(run_model, run_adapter) == promotion("sft-2").model_actor == NEW
    assert actor_key("HuggingFaceTB/SmolLM2-135M-Instruct", None) == promotion(None).model_actor == BASE
    assert actor_key("/models/my-ckpt", "/tmp/lora") == actor_key("my-ckpt+lora", None) == "my-ckpt+lora"
    assert actors.ADAPTER_SUBDIR == ADAPTER_SUBDIR


# ---- actor-tagged credit -----------------------------------------------------------------


def test_credit_carries_the_actor_into_the_journal_and_the_record(bank):
    ids = stored(bank)
    before = bank.get(ids[0]).value
    report = credit_episode(bank, True, "keyroom", ids[:2], actor="run:r9", model_actor=OLD)
    rec = bank.get(ids[0])
    assert report.model_actor == OLD
    assert (rec.credit_actor, rec.value_prior, rec.use_count) == (OLD, before, 1)
    assert rec.value == pytest.approx(ema_update(before, report.target, bank.config.value_alpha))
    entry = bank.history(ids[0])[-1].entry
    assert (entry.op, entry.actor, entry.payload["model_actor"]) == ("credit", "run:r9", OLD)
    credit_episode(bank, False, "keyroom", ids[:1], model_actor=NEW)
    assert bank.get(ids[0]).credit_actor == NEW
    assert bank.get(ids[0]).value_prior == before  # the label before the first credit, kept


# ---- decay on promotion ------------------------------------------------------------------


def test_promotion_decays_credit_older_actors_taught_and_only_that(bank):
    ids = stored(bank, 4)
    for _ in range(3):
        credit_episode(bank, True, "keyroom", ids[:1], baseline=0.2, model_actor=OLD)
    credit_episode(bank, False, "keyroom", ids[1:2], baseline=0.2)  # actor unknown: counts as older
    credit_episode(bank, True, "keyroom", ids[2:3], baseline=0.2, model_actor=NEW)
    credit_episode(bank, True, "keyroom", ids[3:4], baseline=0.2, model_actor="other-base+x")
    before = {i: bank.get(i) for i in ids}
    new = promotion("sft-2")

    report = decay_older_actors(bank, new.key, new.model_actor, decay=0.5, actor="promote:sft-2")
    assert sorted(report.ids) == ids[:2] and not report.already_applied

    old = bank.get(ids[0])
    assert (old.use_count, old.use_successes) == (3, 3)  # lifetime history kept
    assert (old.effective_uses, old.effective_wins) == (1.5, 1.5)
    assert old.utility == pytest.approx(utility_of(1.5, 1.5))
    assert old.utility < before[ids[0]].utility
    prior = old.value_prior
    assert old.value == pytest.approx(decay_toward(before[ids[0]].value, prior, 0.5))
    assert abs(old.value - prior) < abs(before[ids[0]].value - prior)
    unknown = bank.get(ids[1])
    assert unknown.utility == pytest.approx(utility_of(0.5, 0.0))
    assert unknown.utility > before[ids[1]].utility  # back toward 0.5
    for rid in ids[2:]:  # learned under the new actor, or under another base model: untouched
        assert bank.get(rid).model_dump() == before[rid].model_dump()

    again = decay_older_actors(bank, new.key, new.model_actor, decay=0.5)
    assert again.already_applied and again.ids == [] and bank.get(ids[0]).effective_uses == 1.5
    history = bank.history(ids[0])
    assert [h.entry.op for h in history][-2:] == ["credit", "decay"]
    assert history[-1].entry.actor == "promote:sft-2" and history[-1].entry.payload["change"] == new.key

    credit_episode(bank, True, "keyroom", ids[:1], baseline=0.2, model_actor=NEW)  # the new actor counts in full
    assert bank.get(ids[0]).effective_uses == 2.5
    assert bank.get(ids[0]).utility == pytest.approx(utility_of(2.5, 2.5))


def test_each_promotion_decays_once_and_older_credit_decays_again(bank):
    ids = stored(bank, 1)
    credit_episode(bank, True, "keyroom", ids, baseline=0.5, model_actor=f"{BASE}+sft-0")
    for i, adapter in enumerate(["sft-1", "sft-2"]):
        p = promotion(adapter, t=1_800_000_000.0 + i)
        decay_older_actors(bank, p.key, p.model_actor, decay=0.5)
        decay_older_actors(bank, p.key, p.model_actor, decay=0.5)
    assert bank.get(ids[0]).effective_uses == 0.25
    rollback = promotion("sft-1", op="rollback", t=1_800_000_009.0)
    assert rollback.key != promotion("sft-1", t=1_800_000_009.0).key
    assert decay_older_actors(bank, rollback.key, rollback.model_actor, decay=0.0).ids == ids


def test_the_decayed_bank_is_the_replay_of_its_journal(tmp_path):
    b = open_test_bank(tmp_path)
    ids = stored(b, 3)
    credit_episode(b, True, "keyroom", ids, baseline=0.3, model_actor=OLD)
    p = promotion("sft-2")
    decay_older_actors(b, p.key, p.model_actor, decay=0.3)
    credit_episode(b, False, "keyroom", ids[:1], baseline=0.3, model_actor=NEW)
    live = {i: b.get(i).model_dump(exclude={"updated_at"}) for i in ids}
    decay_entry = next(h.entry for h in b.history(ids[1]) if h.entry.op == "decay")
    b.keeper.materializer.apply(decay_entry, check_applied=True)  # a crash replay: already applied, skipped
    assert {i: b.get(i).model_dump(exclude={"updated_at"}) for i in ids} == live
    b.rebuild()
    assert {i: b.get(i).model_dump(exclude={"updated_at"}) for i in ids} == live
    b.close()


def test_a_rolled_back_decay_can_be_applied_again(tmp_path):
    b = open_test_bank(tmp_path)
    ids = stored(b, 1)
    credit_episode(b, True, "keyroom", ids, baseline=0.3, model_actor=OLD)
    before = b.get(ids[0]).utility
    cut = b.history(ids[0])[-1].entry.time
    p = promotion("sft-2", t=cut + 100)
    decay_older_actors(b, p.key, p.model_actor, decay=0.5)
    b.rebuild(as_of=cut)
    assert b.get(ids[0]).utility == pytest.approx(before)
    assert not decay_older_actors(b, p.key, p.model_actor, decay=0.5).already_applied
    assert b.get(ids[0]).effective_uses == 0.5
    b.close()


def test_banks_and_journals_of_older_versions_still_load(tmp_path, bank):
    ids = stored(bank, 1)
    old_style = bank.get(ids[0]).model_dump(mode="json")
    for name in ("credit_actor", "credit_uses", "credit_wins", "value_prior"):
        old_style.pop(name)
    assert record_from_dict(old_style).effective_uses == 0
    bank.credit(ids, True, target=1.0)  # an entry as older versions wrote it: no actor
    entry = bank.history(ids[0])[-1].entry
    assert "model_actor" not in entry.payload and bank.get(ids[0]).credit_actor is None
    p = promotion("sft-2")
    decay_older_actors(bank, p.key, p.model_actor, decay=0.5)
    rec = bank.get(ids[0])
    assert rec.utility == pytest.approx(utility_of(0.5, 0.5))
    assert rec.value == pytest.approx(decay_toward(ema_update(rec.value_prior, 1.0, 0.1), rec.value_prior, 0.5))


def test_a_record_credited_before_value_priors_decays_toward_neutral(bank):
    ids = stored(bank, 1)
    bank.credit(ids, True, target=1.0)
    located = bank.view.locate(ids)[ids[0]]
    legacy = located.record.model_copy(update={"value_prior": None, "value": 0.9})  # as an older crl left it
    bank.view.update([(located, legacy)], located.jseq)
    p = promotion("sft-2")
    decay_older_actors(bank, p.key, p.model_actor, decay=0.5)
    assert bank.get(ids[0]).value == pytest.approx(decay_toward(0.9, NEUTRAL_VALUE, 0.5))


def test_the_registry_names_the_change_the_bank_aligns_with(tmp_path):
    registry = AdapterRegistry(tmp_path / "adapters")
    assert registry.last_change(BASE) is None
    registry.root.mkdir(parents=True)
    lines = [promotion("sft-1", t=1.0), promotion("sft-2", t=2.0), promotion("sft-1", op="rollback", t=3.0)]
    other = Promotion(op="promote", base_model="other", adapter="x", previous=None, time=4.0)
    (registry.root / "promotions.jsonl").write_text("".join(p.model_dump_json() + "\n" for p in [*lines, other]))
    last = registry.last_change(BASE)
    assert last == lines[-1] and last.model_actor == OLD
    assert len({p.key for p in lines}) == 3


# ---- paired credit -----------------------------------------------------------------------

GOOD, BAD, IDLE = "st:keyroom:r0-0000:0", "st:keyroom:r0-0001:0", "st:keyroom:r0-0002:0"
RIGHT = {seed: ("north" if seed % 2 else "south") for seed in range(8)}


def play(run_id: str, seed: int, advice: dict[str, str] | None) -> Episode:
    """The scripted game: one move, right when it is RIGHT[seed]. Without memory the actor
    always says "south" (right on even seeds); with memory it follows the advice of the
    memory its prompt holds."""
    memory_key, move = next(iter(advice.items())) if advice else (None, "south")
    prompt = PromptReport(tokens=10, budget=100, memory_keys=[memory_key, "av:" + move] if memory_key else [])
    ep = Episode(f"{run_id}-{seed:04d}", run_id, "keyroom/key", seed, "Go the right way.", model=OLD)
    ep.steps.append(Step(index=0, observation="A fork.", action=move, done=True, extra=StepExtra(prompt=prompt)))
    ep.status, ep.success = "done", move == RIGHT[seed]
    return ep


def with_memory_advice(seed: int) -> dict[str, str]:
    """Seeds 0-3: the good memory says the right move; seeds 4 and 6: the bad one says the
    wrong move; seeds 5 and 7: a memory says what the actor would do anyway."""
    if seed < 4:
        return {GOOD: RIGHT[seed]}
    if seed % 2 == 0:
        return {BAD: "north"}
    return {IDLE: "south"}


def test_paired_credit_rewards_the_memory_that_helped_and_blames_the_one_that_hurt(bank, tmp_path):
    for i in range(3):
        bank.ingest_episode(episode("r0", i, ["look"], True))
    with_memory = [play("rw", s, with_memory_advice(s)) for s in range(8)]
    without = [play("rn", s, None) for s in reversed(range(8))]  # any order: paired by seed
    assert used_memory_ids(with_memory[0]) == [GOOD]

    report = paired_credit(bank, with_memory, without)
    diffs = {p.seed: p.diff for p in report.pairs}
    assert diffs == {0: 0, 1: 1, 2: 0, 3: 1, 4: -1, 5: 0, 6: -1, 7: 0}
    assert (report.helped, report.hurt, report.ties, report.written) == (2, 2, 4, 4)

    good, bad, idle = bank.get(GOOD), bank.get(BAD), bank.get(IDLE)
    assert (good.use_count, good.use_successes, good.credit_actor) == (2, 2, OLD)
    assert (bad.use_count, bad.use_successes) == (2, 0)
    assert good.utility > 0.5 > bad.utility
    assert good.value > good.value_prior and bad.value < bad.value_prior
    assert idle.use_count == 0  # it changed nothing: lost either way
    entry = bank.history(GOOD)[-1].entry
    assert entry.payload["paired"] == {
        "task": "keyroom/key",
        "seed": 3,
        "with": "rw-0003",
        "without": "rn-0003",
        "diff": 1,
    }
    assert entry.actor == "paired:rw/rn"

    assert paired_credit(bank, with_memory, without).written == 0  # idempotent per pair
    assert bank.get(GOOD).use_count == 2

    for run, eps in (("rw", with_memory), ("rn", without)):
        (tmp_path / "runs" / run).mkdir(parents=True)
        with EpisodeLog(tmp_path / "runs" / run / "episodes.jsonl") as log:
            for ep in eps:
                log.start(ep)
                for step in ep.steps:
                    log.step(ep.episode_id, step)
                log.end(ep)
    again = paired_credit_runs(bank, "rw", "rn")
    assert (again.helped, again.hurt, again.written) == (2, 2, 0)


def test_paired_credit_leaves_out_what_it_cannot_pair_and_refuses_different_actors(bank):
    for i in range(3):
        bank.ingest_episode(episode("r0", i, ["look"], True))
    with_memory = [play("rw", s, with_memory_advice(s)) for s in range(3)]
    unfinished = play("rw", 5, with_memory_advice(5))
    unfinished.status = "running"
    without = [play("rn", s, None) for s in (1, 2)]
    report = paired_credit(bank, [*with_memory, unfinished], without)
    assert sorted(report.unpaired) == ["rw-0000", "rw-0005"] and len(report.pairs) == 2
    other = [play("rn", 1, None)]
    other[0].model = NEW
    with pytest.raises(ValueError, match="different actors"):
        paired_credit(bank, with_memory[1:2], other)


def test_the_history_json_of_a_decay_is_plain_json(bank):
    ids = stored(bank, 1)
    credit_episode(bank, True, "keyroom", ids, model_actor=OLD)
    p = promotion("sft-2")
    decay_older_actors(bank, p.key, p.model_actor)
    entry = bank.history(ids[0])[-1].entry
    assert json.loads(entry.to_json())["payload"]["decay"] == bank.config.actor_decay


def test_a_training_run_after_a_promotion_decays_the_older_actors_credit_once(tmp_path):
    """The agent side: `crl run` aligns memory with the promoted actor before it plays."""
    from crl.agent.app import realign_memory
    from crl.agent.config import load_settings
    from crl.finetune.registry import AdapterRegistry
    from tests.finetune_fixtures import register_fake

    settings = load_settings({"home": str(tmp_path)})
    registry = AdapterRegistry.of(tmp_path)
    register_fake(registry, tmp_path, "sft-1")
    registry.promote("sft-1")
    calls = []

    class Bank:
        config = settings.memory

        def decay_credit(self, change, model_actor, share, actor=None):
            calls.append((change, model_actor, share, actor))
            return [], len(calls) > 1

    realign_memory(settings, Bank())
    realign_memory(settings, Bank())
    change = registry.last_change(registry.get("sft-1").base_model)
    assert calls[0] == (change.key, change.model_actor, settings.memory.actor_decay, "promote:sft-1")
    assert calls[0][:2] == calls[1][:2]  # the same change: the bank makes the second one a no-op
