"""Train a LoRA adapter with TRL (SFTTrainer or DPOTrainer) and PEFT; resumable, guarded, distributable.

A training job lives in a work folder:

    <work>/job.json        what to train (dataset, base model, parent adapter, config)
    <work>/checkpoints/    Trainer checkpoints (adapter, optimizer, scheduler, RNG states)
    <work>/adapter/        the finished adapter (PEFT files), written by the main process only
    <work>/metrics.json    loss, steps, examples/s, wall time

Resuming from the last checkpoint gives the same adapter as an uninterrupted run: the data
order, dropout and optimizer state all come back from the checkpoint.

The same code runs under `accelerate launch` (several GPUs, several nodes, or `--cpu
--num_processes 2` with gloo): the Trainer shards the batches, and only the main process
writes the adapter (`is_main_process`).

DPO on top of an SFT adapter continues training that adapter; TRL then keeps a frozen copy
of it as the reference (the SFT policy), which is what "reference = adapter disabled" gives
on a model with the SFT adapter merged, without needing the merged model afterwards. DPO on
the bare base model trains a fresh adapter with the reference = adapter disabled = base.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from crl.finetune.config import FinetuneConfig
from crl.finetune.dataset_card import load_rows, read_card
from crl.finetune.errors import FinetuneError

JOB_FILE = "job.json"
METRICS_FILE = "metrics.json"
ADAPTER_DIR = "adapter"
CHECKPOINTS_DIR = "checkpoints"


class EmptyLossMaskError(FinetuneError, ValueError):
    """An example would contribute nothing to the loss (all labels masked)."""


@dataclass
class TrainJob:
    """Everything needed to (re)start one training run; saved as job.json."""

    job_id: str
    kind: Literal["sft", "dpo"]
    dataset_dir: str
    base_model: str
    base_model_path: str
    config: dict[str, Any]
    parent_id: str | None = None
    parent_adapter: str | None = None
    created_at: float = field(default_factory=time.time)

    @property
    def finetune(self) -> FinetuneConfig:
        return FinetuneConfig.model_validate(self.config)

    def save(self, work_dir: Path) -> None:
        work_dir.mkdir(parents=True, exist_ok=True)
        (work_dir / JOB_FILE).write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls, work_dir: Path) -> "TrainJob":
        path = Path(work_dir) / JOB_FILE
        if not path.is_file():
            raise FileNotFoundError(f"no training job at {work_dir} (job.json missing)")
        return cls(**json.loads(path.read_text()))


@dataclass
class TrainResult:
    """How a training run ended."""

    completed: bool
    adapter_dir: Path | None
    metrics: dict[str, Any]
    last_checkpoint: str | None = None


def resolve_device(device: str) -> str:
    """'cuda' or 'cpu' for a configured device ('auto' picks CUDA when there is one)."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"finetune.device = {device!r} but CUDA is not available; use cpu")
    return device


def _threads() -> None:
    """Size torch's CPU pool to the cores this process may use (a pool larger than that collapses)."""
    import torch

    if os.environ.get("OMP_NUM_THREADS"):
        return
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    explicit = os.environ.get("CRL_THREADS", "").strip()
    torch.set_num_threads(max(1, int(explicit) if explicit else cores))


def _lora_config(cfg: FinetuneConfig):
    from peft import LoraConfig

    targets: Any = cfg.target_modules
    if targets == ["all-linear"]:
        targets = "all-linear"
    return LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )


def _checkpointing_arg() -> str:
    """transformers 5 renamed gradient_checkpointing to activation_checkpointing (the old name warns)."""
    from transformers import TrainingArguments

    fields = TrainingArguments.__dataclass_fields__
    return "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"


def planned_steps(cfg: FinetuneConfig, examples: int, processes: int = 1, device: str = "cpu") -> int:
    """Optimizer steps a round will run: `max_steps`, or `epochs` passes over `examples`."""
    if cfg.max_steps > 0:
        return cfg.max_steps
    batch, accumulation = cfg.batch_layout(device)
    per_step = batch * accumulation * max(1, processes)
    return max(1, math.ceil(cfg.epochs * math.ceil(examples / per_step)))


def logging_interval(cfg: FinetuneConfig, steps: int) -> int:
    """`logging_steps`, shortened so that even a short round logs its loss at least four times
    (a round logged once has first_loss == last_loss, which says nothing)."""
    return max(1, min(cfg.logging_steps, steps // 4))


def _common_args(
    cfg: FinetuneConfig, work_dir: Path, device: str, max_length: int, progress: bool, examples: int
) -> dict[str, Any]:
    from crl.finetune.distributed import num_processes

    on_cpu = device == "cpu"
    steps = planned_steps(cfg, examples, num_processes(), device)
    batch, accumulation = cfg.batch_layout(device)
    return dict(
        output_dir=str(work_dir / CHECKPOINTS_DIR),
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=accumulation,
        warmup_steps=cfg.warmup_ratio,
        logging_steps=logging_interval(cfg, steps),
        logging_nan_inf_filter=False,  # a NaN must reach the guard, not be averaged away
        save_strategy="steps",
        save_steps=cfg.save_steps,
        save_total_limit=cfg.save_total_limit,
        seed=cfg.seed,
        data_seed=cfg.seed,
        bf16=(not on_cpu) or cfg.cpu_precision == "bf16-autocast",
        use_cpu=on_cpu,
        **{_checkpointing_arg(): cfg.gradient_checkpointing},
        report_to="none",
        disable_tqdm=not progress,
        dataloader_num_workers=0,
        max_length=max_length,
    )


def check_loss_mask(dataset, kind: str, expected: int, max_length: int) -> int:
    """Count the trained tokens of a dataset TRL prepared; fail loudly if an example has none or lost its end.

    TRL drops fully masked examples and truncates long ones without an error; both would
    train on something other than the dataset, so both are errors here.

    Raises:
        EmptyLossMaskError: an example's labels (SFT) or completion (DPO) are all masked,
            TRL dropped examples, or an example was truncated to `max_length`.
    """
    if len(dataset) != expected:
        raise EmptyLossMaskError(
            f"{expected - len(dataset)} of {expected} examples were dropped by TRL for having no token to learn "
            "from (an all-zero loss mask); rebuild the dataset with `crl dataset build`."
        )
    total = 0
    for i, row in enumerate(dataset):
        if kind == "sft":
            n = sum(1 for t in row["labels"] if t != -100)
            length = len(row["input_ids"])
        else:
            n = min(len(row["chosen_ids"]), len(row["rejected_ids"]))
            length = len(row["prompt_ids"]) + max(len(row["chosen_ids"]), len(row["rejected_ids"]))
        if n == 0:
            raise EmptyLossMaskError(
                f"example {i} has no token to learn from (its loss mask is all zero); the dataset's replies are "
                "empty or were truncated away. Rebuild it with `crl dataset build`."
            )
        if length >= max_length:
            raise EmptyLossMaskError(
                f"example {i} is {length} tokens, at max_length {max_length}: its reply would be cut. Rebuild the "
                "dataset (its card sets max_length from the measured lengths) or raise finetune.max_length."
            )
        total += n
    return total


def _load_model(job: TrainJob, cfg: FinetuneConfig, device: str):
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    model = AutoModelForCausalLM.from_pretrained(job.base_model_path, dtype=dtype, local_files_only=True)
    if job.parent_adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, job.parent_adapter, is_trainable=True)
        return model, None
    return model, _lora_config(cfg)


def build_trainer(job: TrainJob, work_dir: Path, progress: bool = True, callbacks: list | None = None):
    """The TRL trainer for `job` (dataset loaded and checked); not yet trained."""
    from transformers import set_seed

    from crl.finetune.guards import TrainingGuard
    from crl.finetune.tokens import load_tokenizer

    cfg = job.finetune
    device = resolve_device(cfg.device)
    if device == "cpu":
        _threads()
    set_seed(cfg.seed)
    card = read_card(job.dataset_dir)
    if card.kind != job.kind:
        raise ValueError(
            f"dataset {card.name} is a {card.kind} dataset; `crl finetune {job.kind}` needs a {job.kind} one"
        )
    if card.max_length and card.max_length > cfg.max_length:
        raise ValueError(
            f"dataset {card.name} needs max_length {card.max_length} (its longest example) but finetune.max_length "
            f"is {cfg.max_length}; TRL would cut replies. Rebuild it with `crl dataset build --max-length "
            f"{cfg.max_length}` (longer examples are dropped) or raise --max-length."
        )
    rows = load_rows(job.dataset_dir, trl_only=True)
    tokenizer = load_tokenizer(job.base_model_path)
    model, peft_config = _load_model(job, cfg, device)
    max_length = card.max_length or cfg.max_length
    args = _common_args(cfg, work_dir, device, max_length, progress, len(rows))
    guards = [TrainingGuard(), *(callbacks or [])]
    if job.kind == "sft":
        from trl import SFTConfig, SFTTrainer

        sft_args = SFTConfig(
            learning_rate=cfg.learning_rate,
            completion_only_loss=True,
            assistant_only_loss=False,
            packing=False,
            **args,
        )
        trainer = SFTTrainer(
            model=model,
            args=sft_args,
            train_dataset=rows,
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=guards,
        )
    else:
        from trl import DPOConfig, DPOTrainer

        dpo_args = DPOConfig(learning_rate=cfg.dpo_learning_rate, beta=cfg.dpo_beta, **args)
        trainer = DPOTrainer(
            model=model,
            args=dpo_args,
            train_dataset=rows,
            processing_class=tokenizer,
            peft_config=peft_config,
            callbacks=guards,
        )
    if not progress:
        from transformers.trainer_callback import PrinterCallback

        trainer.remove_callback(PrinterCallback)  # it prints log dicts on stdout, where --json output goes
    check_loss_mask(trainer.train_dataset, job.kind, len(rows), max_length)
    return trainer


def run_training(
    job: TrainJob,
    work_dir: str | Path,
    resume: bool = False,
    stop_after_steps: int | None = None,
    progress: bool = True,
) -> TrainResult:
    """Train (or resume training) `job` in `work_dir`; the main process writes the adapter and metrics.

    Args:
        job: what to train.
        work_dir: the job's folder (job.json is written there).
        resume: continue from the last checkpoint in `work_dir/checkpoints` when there is one.
        stop_after_steps: end early after this many optimizer steps, as an interruption would
            (the result is then `completed=False` and no adapter is written).
        progress: show the Trainer's progress bar.

    Raises:
        TrainingDiverged: NaN/inf loss or gradients, or all-zero gradients.
        EmptyLossMaskError: an example has nothing to learn from.
    """
    from crl.finetune.distributed import is_main_process, num_processes
    from crl.finetune.train_slot import return_freed_memory, training_slot

    work_dir = Path(work_dir)
    if is_main_process():
        job.save(work_dir)  # first, so a job killed at any point can be resumed
    with training_slot(job.finetune.one_at_a_time and num_processes() == 1):
        try:
            return _train(job, work_dir, resume, stop_after_steps, progress)
        finally:
            return_freed_memory()


def _train(job: TrainJob, work_dir: Path, resume: bool, stop_after_steps: int | None, progress: bool) -> TrainResult:
    from transformers.trainer_utils import get_last_checkpoint

    from crl.finetune.guards import StopAfterSteps

    checkpoints = work_dir / CHECKPOINTS_DIR
    stopper = StopAfterSteps(stop_after_steps) if stop_after_steps else None
    trainer = build_trainer(job, work_dir, progress, [stopper] if stopper else [])
    last = get_last_checkpoint(str(checkpoints)) if resume and checkpoints.is_dir() else None
    started = time.perf_counter()
    output = trainer.train(resume_from_checkpoint=last)
    wall = time.perf_counter() - started
    latest = get_last_checkpoint(str(checkpoints)) if checkpoints.is_dir() else None
    if stopper is not None and stopper.stopped and trainer.state.global_step < trainer.state.max_steps:
        return TrainResult(False, None, {"steps": trainer.state.global_step}, latest)
    metrics = _metrics(trainer, output, wall, len(trainer.train_dataset), resumed_from=last)
    adapter_dir = work_dir / ADAPTER_DIR
    if trainer.is_world_process_zero():
        model = trainer.accelerator.unwrap_model(trainer.model)
        # TRL adds a frozen "ref" copy when DPO continues an adapter; only the trained one is the result.
        model.save_pretrained(str(adapter_dir), selected_adapters=["default"])
        (work_dir / METRICS_FILE).write_text(json.dumps(metrics, indent=2) + "\n")
    trainer.accelerator.wait_for_everyone()
    return TrainResult(True, adapter_dir, metrics, latest)


def _metrics(trainer, output, wall: float, examples: int, resumed_from: str | None) -> dict[str, Any]:
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    state = trainer.state
    processes = trainer.accelerator.num_processes
    start = int(resumed_from.rsplit("-", 1)[-1]) if resumed_from else 0
    per_step = trainer.args.per_device_train_batch_size * trainer.args.gradient_accumulation_steps * processes
    seen = (state.global_step - start) * per_step
    return {
        "train_loss": float(output.training_loss),
        "first_loss": losses[0] if losses else None,
        "last_loss": losses[-1] if losses else None,
        "steps": state.global_step,
        "epochs": float(state.epoch or 0.0),
        "examples": examples,
        "examples_seen": seen,
        "wall_seconds": wall,
        "examples_per_s": seen / wall if wall > 0 else None,
        "processes": processes,
        "device": str(trainer.args.device),
        "bf16": bool(trainer.args.bf16),
        "resumed_from": resumed_from,
        "log_history": state.log_history,
    }
