"""One fine-tuning round: build a dataset from the bank, train an adapter, register it, gate it.

`FinetuneContext` carries what the agent side knows (the data directory, the base model and
where its checkpoint is, how to open the bank, how to evaluate); the functions here are
what `crl finetune ...` and the scheduler call.

Training jobs live in `<home>/finetune/jobs/<adapter id>/` until their adapter is
registered; `train_and_register(..., resume_job=ID)` continues an interrupted one.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from crl.finetune.build import build_dataset
from crl.finetune.config import FinetuneConfig
from crl.finetune.dataset_card import new_dataset_name
from crl.finetune.distributed import is_main_process, on_main, wait_for_everyone
from crl.finetune.gate import Evaluator, run_gate
from crl.finetune.registry import AdapterRegistry, GateRecord, Lineage, new_adapter_id
from crl.finetune.source import EpisodeSource
from crl.finetune.tokens import load_tokenizer
from crl.finetune.train import CHECKPOINTS_DIR, TrainJob, TrainResult, run_training


@dataclass
class FinetuneContext:
    """What a round needs from the rest of the system.

    Attributes:
        home: the data directory.
        config: the `finetune` settings.
        base_model: the key adapters are registered under (`registry.base_model_key`).
        base_model_path: the base model's checkpoint folder.
        open_bank: opens the experience bank (a context manager; closed before training).
        evaluator: plays dev episodes for the gate; None skips the gate (nothing is promoted).
        progress: show progress bars.
    """

    home: Path
    config: FinetuneConfig
    base_model: str
    base_model_path: Path
    open_bank: Callable[[], AbstractContextManager[EpisodeSource]] | None = None
    evaluator: Evaluator | None = None
    progress: bool = True

    @property
    def registry(self) -> AdapterRegistry:
        return AdapterRegistry.of(self.home)

    @property
    def datasets_dir(self) -> Path:
        return Path(self.home) / "datasets"

    @property
    def jobs_dir(self) -> Path:
        return Path(self.home) / "finetune" / "jobs"


def drift_factor(bank, family: str | None, tasks: list[str] | None) -> float:
    """How much the drift monitor scales synthetic experience in a dataset of `family` (or of
    `tasks`' families, or of every family): the smallest factor among them (1.0 without drift)."""
    from crl.memory.synthesis.drift import synthetic_weight

    if family:
        families = [family]
    elif tasks:
        families = sorted({t.split("/", 1)[0] for t in tasks})
    else:
        families = bank.view.families("step")
    return min((synthetic_weight(bank, f) for f in families), default=1.0)


def make_dataset(
    ctx: FinetuneContext,
    kind: str,
    family: str | None = None,
    tasks: list[str] | None = None,
    out_dir: Path | None = None,
) -> Path:
    """Build a dataset from the bank into `out_dir` (default `<home>/datasets/<kind>-<time>-<hex>`).

    Only the main process reads the bank; the folder is shared with the others.
    """
    if ctx.open_bank is None:
        raise ValueError("building a dataset needs the experience bank; none was given")

    def build() -> str:
        out = Path(out_dir) if out_dir else ctx.datasets_dir / new_dataset_name(kind)
        tokenizer = load_tokenizer(ctx.base_model_path)
        with ctx.open_bank() as bank:
            weight = ctx.config.synthetic_weight * drift_factor(bank, family, tasks)
            build_dataset(
                kind,
                bank,
                ctx.config,
                out,
                family=family,
                tasks=tasks,
                tokenizer=tokenizer,
                base_model=ctx.base_model,
                synthetic_weight=weight,
            )
        return str(out)

    return Path(on_main(build))


def train_and_register(
    ctx: FinetuneContext,
    kind: str,
    dataset_dir: Path | None = None,
    from_adapter: str | None = None,
    resume_job: str | None = None,
    stop_after_steps: int | None = None,
) -> tuple[TrainResult, Lineage | None]:
    """Train an adapter on a dataset and register it (main process), or resume an interrupted job.

    Args:
        kind: sft or dpo.
        dataset_dir: the dataset (not needed when resuming).
        from_adapter: a registered adapter to continue from (DPO on top of SFT).
        resume_job: the id of an interrupted job to continue from its last checkpoint.
        stop_after_steps: stop early after this many steps (tests, benchmarks).

    Returns:
        The training result and, once complete, the registered adapter's lineage (None on
        the other processes of a distributed launch and when stopped early).
    """
    registry = ctx.registry
    if resume_job:
        work = ctx.jobs_dir / resume_job
        job = TrainJob.load(work)
        if (registry.path(job.job_id) / "lineage.json").is_file():
            raise ValueError(
                f"job {job.job_id} already finished: its adapter is registered (crl adapters show {job.job_id})"
            )
    else:
        if dataset_dir is None:
            raise ValueError("give a dataset (--dataset), or --resume a job")
        parent_id = registry.resolve(from_adapter) if from_adapter else None
        if parent_id and registry.get(parent_id).base_model != ctx.base_model:
            raise ValueError(f"adapter {parent_id} was trained on another base model than {ctx.base_model}")
        job_id = on_main(lambda: new_adapter_id(kind))
        work = ctx.jobs_dir / job_id
        job = TrainJob(
            job_id=job_id,
            kind=kind,  # type: ignore[arg-type]
            dataset_dir=str(Path(dataset_dir).resolve()),
            base_model=ctx.base_model,
            base_model_path=str(ctx.base_model_path),
            config=ctx.config.model_dump(mode="json"),
            parent_id=parent_id,
            parent_adapter=str(registry.adapter_dir(parent_id)) if parent_id else None,
        )
    result = run_training(job, work, resume=bool(resume_job), stop_after_steps=stop_after_steps, progress=ctx.progress)
    if not result.completed:
        return result, None
    lineage = None
    if is_main_process():
        lineage = registry.register(
            job.job_id,
            job.kind,
            result.adapter_dir,
            job.base_model,
            job.base_model_path,
            job.dataset_dir,
            job.config,
            result.metrics,
            parent=job.parent_id,
        )
        shutil.rmtree(work / CHECKPOINTS_DIR, ignore_errors=True)
    wait_for_everyone()
    return result, lineage


def gate_adapter(ctx: FinetuneContext, adapter_id: str, promote: bool = True) -> GateRecord:
    """Evaluate an adapter against the promoted one and promote it if it is not worse."""
    if ctx.evaluator is None:
        raise ValueError("the gate needs an evaluator")
    return run_gate(ctx.registry, adapter_id, ctx.evaluator, ctx.config, promote=promote)
