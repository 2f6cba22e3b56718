"""LoRA training for real on the embedded model (CPU, a few steps), and the guards around it."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from crl.finetune.config import FinetuneConfig
from crl.finetune.guards import TrainingDiverged, TrainingGuard
from crl.finetune.train import EmptyLossMaskError, check_loss_mask, logging_interval, planned_steps

REPO = Path(__file__).resolve().parent.parent
BASE = "smollm2-135m-instruct"
# Tiny on purpose: 2 shared cores. Short examples only (max_length), rank 4 on two projections.
TINY = FinetuneConfig(
    max_steps=3,
    batch_size=2,
    gradient_accumulation=1,
    lora_rank=4,
    lora_alpha=8,
    target_modules=["q_proj", "v_proj"],
    learning_rate=1e-3,
    dpo_learning_rate=1e-3,
    max_length=192,
    logging_steps=1,
    save_steps=2,
    warmup_ratio=0.0,
    gate_episodes=2,
)


# ---- guards (no model) -------------------------------------------------------------------------


class _State:
    global_step = 4


class _Args:
    learning_rate = 2e-4


def _with_grads(*grads):
    layer = torch.nn.Linear(2, 1, bias=False)
    layer.weight.grad = torch.tensor([list(grads)])
    return layer


def test_guard_aborts_on_nan_and_zero_gradients_and_nan_loss():
    guard = TrainingGuard()
    guard.on_pre_optimizer_step(_Args(), _State(), None, model=_with_grads(0.5, -1.0))
    with pytest.raises(TrainingDiverged, match="NaN or infinite.*lower the learning rate"):
        guard.on_pre_optimizer_step(_Args(), _State(), None, model=_with_grads(float("nan"), 1.0))
    with pytest.raises(TrainingDiverged, match="all gradients are zero at step 5"):
        guard.on_pre_optimizer_step(_Args(), _State(), None, model=_with_grads(0.0, 0.0))
    with pytest.raises(TrainingDiverged, match="loss is nan"):
        guard.on_log(_Args(), _State(), None, logs={"loss": float("nan")})


def test_unset_batch_layout_trains_one_example_at_a_time_on_cpu_and_keeps_eight_per_step():
    unset = FinetuneConfig()
    assert unset.batch_layout("cpu") == (1, 8) and unset.batch_layout("cuda") == (4, 2)
    assert FinetuneConfig(batch_size=2).batch_layout("cpu") == (2, 4)
    assert FinetuneConfig(batch_size=16).batch_layout("cuda") == (16, 1)
    assert FinetuneConfig(gradient_accumulation=3).batch_layout("cpu") == (1, 3)
    assert planned_steps(FinetuneConfig(epochs=1), examples=48) == 6
    assert planned_steps(FinetuneConfig(epochs=1, batch_size=8), examples=48, device="cuda") == 6


def test_short_rounds_log_their_loss_at_least_four_times():
    cfg = FinetuneConfig(epochs=1, batch_size=8, gradient_accumulation=1, logging_steps=5)
    assert planned_steps(cfg, examples=48) == 6
    assert planned_steps(cfg, examples=48, processes=2) == 3
    assert planned_steps(cfg.model_copy(update={"max_steps": 3}), examples=48) == 3
    assert logging_interval(cfg, 6) == 1
    assert logging_interval(cfg, 14) == 3
    assert logging_interval(cfg, 400) == 5


def test_loss_mask_check_fails_loudly():
    ok = [{"input_ids": [1, 2, 3], "labels": [-100, 2, 3]}]
    assert check_loss_mask(ok, "sft", expected=1, max_length=8) == 2
    with pytest.raises(EmptyLossMaskError, match="all zero"):
        check_loss_mask([{"input_ids": [1, 2], "labels": [-100, -100]}], "sft", expected=1, max_length=8)
    with pytest.raises(EmptyLossMaskError, match="dropped by TRL"):
        check_loss_mask(ok, "sft", expected=2, max_length=8)
    with pytest.raises(EmptyLossMaskError, match="reply would be cut"):
        check_loss_mask(ok, "sft", expected=1, max_length=3)
    dpo = [{"prompt_ids": [1], "chosen_ids": [2], "rejected_ids": []}]
    with pytest.raises(EmptyLossMaskError):
        check_loss_mask(dpo, "dpo", expected=1, max_length=8)


# ---- real training ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def base_path(embedded_models_dir) -> Path:
    from crl.agent.llm.embedded import embedded_model_path

    return embedded_model_path(embedded_models_dir)


@pytest.fixture(scope="module")
def trained_home(tmp_path_factory, base_path) -> Path:
    """A bank filled by scripted agents, with an SFT and a DPO dataset built from it."""
    from crl.finetune.build import build_dataset
    from crl.finetune.tokens import load_tokenizer
    from tests.finetune_fixtures import fill_bank, open_bank

    home = fill_bank(tmp_path_factory.mktemp("finetune-train") / ".crl")
    tokenizer = load_tokenizer(base_path)
    bank = open_bank(home)
    try:
        for kind in ("sft", "dpo"):
            build_dataset(
                kind,
                bank,
                TINY,
                home / "datasets" / kind,
                family="keyroom",
                tasks=["keyroom/key"],
                tokenizer=tokenizer,
                base_model=BASE,
            )
    finally:
        bank.close()
    return home


def _context(home: Path, base_path: Path, config: FinetuneConfig = TINY, evaluator=None):
    from crl.finetune.rounds import FinetuneContext

    return FinetuneContext(
        home=home, config=config, base_model=BASE, base_model_path=base_path, evaluator=evaluator, progress=False
    )


def reply_logprob(chat, prompt: list[dict], reply: str) -> float:
    """Sum of log-probabilities the chat model gives `reply` after `prompt` (the training target)."""
    tok = chat.tokenizer
    prompt_ids = tok.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True)[
        "input_ids"
    ]
    full = tok.apply_chat_template(prompt + [{"role": "assistant", "content": reply}], tokenize=True, return_dict=True)[
        "input_ids"
    ]
    ids = torch.tensor([full])
    with torch.no_grad():
        logits = chat.model(ids).logits.float()
    logps = torch.log_softmax(logits[0, :-1], dim=-1)
    targets = ids[0, 1:]
    picked = logps[torch.arange(len(targets)), targets]
    return float(picked[len(prompt_ids) - 1 :].sum())


@pytest.fixture(scope="module")
def sft_adapter(trained_home, base_path):
    from crl.finetune.rounds import train_and_register

    result, lineage = train_and_register(_context(trained_home, base_path), "sft", trained_home / "datasets" / "sft")
    return result, lineage


@pytest.mark.slow
def test_sft_round_trains_registers_and_raises_the_replys_probability(trained_home, base_path, sft_adapter):
    from crl.agent.llm.local import LocalChatModel
    from crl.finetune.registry import AdapterRegistry

    result, lineage = sft_adapter
    m = lineage.metrics
    assert result.completed and m["steps"] == 3 and math.isfinite(m["train_loss"]) and m["examples_per_s"] > 0
    assert lineage.dataset.name == "sft" and lineage.parent is None and lineage.config["lora_rank"] == 4
    registry = AdapterRegistry.of(trained_home)
    folder = registry.adapter_dir(lineage.id)
    assert (folder / "adapter_config.json").is_file() and (folder / "adapter_model.safetensors").is_file()
    assert not (trained_home / "finetune" / "jobs" / lineage.id / "checkpoints").exists()
    row = json.loads((trained_home / "datasets" / "sft" / "data.jsonl").read_text().splitlines()[0])
    reply = row["completion"][0]["content"]
    base = LocalChatModel(base_path)
    tuned = LocalChatModel(base_path, adapter=folder)
    try:
        before, after = reply_logprob(base, row["prompt"], reply), reply_logprob(tuned, row["prompt"], reply)
    finally:
        base.close()
        tuned.close()
    assert after > before + 0.5, (before, after)


@pytest.mark.slow
def test_adapter_setting_takes_a_registered_id(trained_home, base_path, sft_adapter):
    """`--adapter sft-…` (an id from `crl adapters ls`) loads that registered adapter's folder."""
    from crl.agent.config import load_settings
    from crl.agent.llm.factory import build_chat_model
    from crl.finetune.registry import AdapterRegistry

    _, lineage = sft_adapter
    settings = load_settings({"home": str(trained_home), "llm": {"model": str(base_path), "adapter": lineage.id}})
    chat = build_chat_model(settings)
    try:
        assert chat.adapter == AdapterRegistry.of(trained_home).adapter_dir(lineage.id)
        assert chat.name.endswith("+" + lineage.id)
    finally:
        chat.close()


@pytest.mark.slow
def test_resuming_after_an_interruption_gives_the_same_adapter(trained_home, base_path, tmp_path):
    from safetensors.torch import load_file

    from crl.finetune.rounds import train_and_register
    from crl.finetune.train import TrainJob, run_training

    config = TINY.model_copy(update={"max_steps": 3, "save_steps": 2, "lora_dropout": 0.1, "batch_size": 1})
    job = TrainJob("whole", "sft", str(trained_home / "datasets" / "sft"), BASE, str(base_path), config.model_dump())
    whole = run_training(job, tmp_path / "whole", progress=False)
    ctx = _context(tmp_path / "home", base_path, config)
    stopped, none = train_and_register(ctx, "sft", trained_home / "datasets" / "sft", stop_after_steps=2)
    assert not stopped.completed and none is None and stopped.last_checkpoint.endswith("checkpoint-2")
    job_id = Path(stopped.last_checkpoint).parent.parent.name
    resumed, lineage = train_and_register(ctx, "sft", resume_job=job_id)
    assert resumed.completed and lineage.id == job_id and resumed.metrics["resumed_from"].endswith("checkpoint-2")
    a = load_file(str(whole.adapter_dir / "adapter_model.safetensors"))
    b = load_file(str(ctx.registry.adapter_dir(job_id) / "adapter_model.safetensors"))
    assert a.keys() == b.keys()
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-6), name
    assert any(float(t.abs().max()) > 0 for n, t in a.items() if "lora_B" in n)


@pytest.mark.slow
def test_dpo_continues_the_sft_adapter(trained_home, base_path, sft_adapter):
    from safetensors.torch import load_file

    from crl.finetune.rounds import train_and_register

    _, sft = sft_adapter
    ctx = _context(trained_home, base_path, TINY.model_copy(update={"max_steps": 2, "batch_size": 1}))
    result, lineage = train_and_register(ctx, "dpo", trained_home / "datasets" / "dpo", from_adapter=sft.id)
    assert lineage.kind == "dpo" and lineage.parent == sft.id and math.isfinite(lineage.metrics["train_loss"])
    folder = ctx.registry.adapter_dir(lineage.id)
    assert sorted(p.name for p in folder.iterdir() if p.is_dir()) == [], "only the trained adapter, no 'ref' copy"
    before = load_file(str(ctx.registry.adapter_dir(sft.id) / "adapter_model.safetensors"))
    after = load_file(str(folder / "adapter_model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before)


@pytest.mark.slow
def test_gate_with_the_real_evaluator_records_its_decision(trained_home, base_path, sft_adapter, tmp_path):
    from crl.agent.config import load_settings
    from crl.agent.finetuning import local_evaluator
    from crl.agent.runs import RunStore
    from crl.finetune.gate import run_gate
    from crl.finetune.registry import AdapterRegistry

    _, sft = sft_adapter
    settings = load_settings(
        {
            "home": str(tmp_path / "evalhome"),
            "agent": {"max_steps": 2, "parallel": 2},
            "llm": {"max_new_tokens": 8, "dtype": "bf16"},
        }
    )
    evaluator = local_evaluator(settings, base=str(base_path))
    registry = AdapterRegistry.of(trained_home)
    decision = run_gate(registry, sft.id, evaluator, TINY, promote=False)
    scores = decision.tasks["keyroom/key"]
    assert scores["candidate"][1] == scores["current"][1] == 2 and decision.current is None
    assert decision.promoted is False and "of 2 paired; one-sided McNemar p =" in decision.reason  # same dev seeds
    assert registry.get(sft.id).gate[-1].reason == decision.reason
    assert len(list((tmp_path / "evalhome" / "evals").iterdir())) == 2, "both sides ran as evaluations"
    runs = RunStore(tmp_path / "evalhome" / "evals")
    assert runs.load(scores["candidate_run"]).adapter == str(registry.adapter_dir(sft.id))
    assert runs.load(scores["candidate_run"]).model.endswith("+" + sft.id)
    assert runs.load(scores["current_run"]).adapter is None


@pytest.mark.slow
def test_two_process_cpu_training_writes_one_adapter(trained_home, base_path, tmp_path):
    """Two CPU processes under `accelerate launch` (torchrun, gloo): one adapter, one registry entry.

    accelerate's `--cpu` flag always starts a single process; `--multi_gpu` on a machine
    without GPUs starts torchrun workers that fall back to gloo on CPU.
    """
    home = tmp_path / ".crl"
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "-m",
        "crl.agent.cli.finetune",
        "--home",
        str(home),
        "finetune",
        "sft",
        "--dataset",
        str(trained_home / "datasets" / "sft"),
        "--base",
        str(base_path),
        "--max-steps",
        "2",
        "--batch-size",
        "1",
        "--rank",
        "4",
        "--target-modules",
        "q_proj,v_proj",
        "--no-gate",
        "--json",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    from crl.finetune.registry import AdapterRegistry

    adapters = AdapterRegistry.of(home).ls()
    assert len(adapters) == 1
    assert adapters[0].metrics["processes"] == 2 and adapters[0].metrics["steps"] == 2
    assert len(list((home / "finetune" / "jobs").iterdir())) == 1
    assert json.loads(proc.stdout[proc.stdout.index("{") :])["adapter"] == adapters[0].id, (
        "only the main process reports"
    )


def test_a_dataset_longer_than_max_length_is_refused_before_training(tmp_path):
    from crl.finetune.dataset_card import write_dataset
    from crl.finetune.sft_data import BuiltDataset
    from crl.finetune.train import TrainJob, build_trainer

    row = {
        "prompt": [{"role": "user", "content": "U"}],
        "completion": [{"role": "assistant", "content": "Action: a"}],
        "task": "keyroom/key",
    }
    write_dataset(tmp_path / "d", BuiltDataset("sft", [row]), filters={}, max_length=2048)
    job = TrainJob("j", "sft", str(tmp_path / "d"), BASE, str(tmp_path / "no-model"), TINY.model_dump())
    with pytest.raises(ValueError, match="needs max_length 2048 .* --max-length 192"):
        build_trainer(job, tmp_path / "work", progress=False)
