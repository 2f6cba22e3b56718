"""The agent side of fine-tuning: what a round needs from the settings, wired once.

`finetune/` knows datasets, training and the registry but not the agent; this module
supplies the rest from a `Settings` object: which base model is selected and where its
checkpoint is, how the bank is opened, and the gate's evaluator, which plays dev-fold
episodes with `agent.app.start_run`. The `crl` command line, the public API
(`crl.build_dataset`, `crl.train_round`) and the benchmarks all build their round from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crl.agent.config import Settings
from crl.finetune.config import FinetuneConfig
from crl.finetune.gate import Evaluator, TaskScore
from crl.finetune.registry import base_model_key
from crl.finetune.rounds import FinetuneContext

if TYPE_CHECKING:
    from crl.agent.app import RunResult
    from crl.finetune.scheduler import Check, RoundRecord


def finetune_config(settings: Settings, **flags: Any) -> FinetuneConfig:
    """`settings.finetune` with command-line flags applied (a flag given as None is not applied).

    Example: `finetune_config(settings, epochs=2, lora_rank=None)` changes only `epochs`.
    """
    given = {k: v for k, v in flags.items() if v is not None}
    return FinetuneConfig.model_validate(settings.finetune.model_dump() | given)


def base_model_path(settings: Settings, base: str | None = None) -> Path | str:
    """The checkpoint the base model loads from: a folder, or a hub id.

    The embedded model (no `llm.model` and no `base`) is converted from its GGUF file once and
    its folder returned; a `.gguf` file is converted the same way.
    """
    model = base or settings.llm.model
    if model is None:
        from crl.agent.llm.embedded import embedded_model_path

        return embedded_model_path(settings.models_dir)
    from crl.agent.llm.local import _resolve_source

    source, _ = _resolve_source(model, settings.models_dir)
    return source


def evaluate_adapter(
    settings: Settings,
    task: str,
    episodes: int,
    adapter: Path | None,
    memory: bool,
    base: str | None = None,
    fold: str = "dev",
) -> RunResult:
    """Play `episodes` episodes of `task` (dev fold by default) with the local base model plus `adapter` (or none).

    Args:
        memory: keep memory in the loop as the settings configure it; False plays the model
            alone: no memory read at all, the model generating (the llm policy) or, under the
            posterior policy, scoring the listed actions (`random` stays random).
    """
    run_settings = settings
    if not memory:
        policy = settings.agent.policy if settings.agent.policy in ("posterior", "random") else "llm"
        agent = settings.agent.model_copy(update={"memory": "off", "policy": policy})
        bank = settings.memory.model_copy(update={"enabled": False})
        run_settings = settings.model_copy(update={"agent": agent, "memory": bank})
    return play_with_adapter(run_settings, task, episodes, adapter, base, fold=fold, kind="eval")


def play_with_adapter(
    settings: Settings, task: str, episodes: int, adapter: Path | None, base: str | None = None, **run_args: Any
) -> RunResult:
    """Play `episodes` episodes of `task` with the local base model plus `adapter` (or none), loaded
    for this run and closed after it; `run_args` go to `start_run` (fold, kind, seed_start)."""
    from crl.agent.app import start_run
    from crl.agent.llm.local import LocalChatModel

    llm = settings.llm.model_copy(update={"adapter": str(adapter) if adapter else None})
    model = LocalChatModel(
        base_model_path(settings, base),
        adapter=adapter,
        device=llm.device,
        dtype=llm.dtype,
        cache_dir=settings.models_dir,
    )
    try:
        return start_run(settings.model_copy(update={"llm": llm}), task, episodes, model=model, **run_args)
    finally:
        model.close()


def local_evaluator(settings: Settings, base: str | None = None, memory: bool | None = None) -> Evaluator:
    """The gate's evaluator: `evaluate_adapter` on each gate task.

    Args:
        memory: keep memory in the loop; False evaluates the model alone
            (default: `finetune.gate_memory`).
    """
    if memory is None:
        memory = settings.finetune.gate_memory

    def evaluate(adapter: Path | None, tasks: Sequence[str], episodes: int) -> list[TaskScore]:
        scores = []
        for task in tasks:
            result = evaluate_adapter(settings, task, episodes, adapter, memory, base)
            s = result.summary
            outcomes = {e.seed: e.success for e in result.episodes if e.finished}
            scores.append(TaskScore(task, s.successes, s.finished, result.info.run_id, outcomes=outcomes))
        return scores

    return evaluate


def finetune_context(
    settings: Settings,
    config: FinetuneConfig | None = None,
    base: str | None = None,
    evaluator: Evaluator | bool = True,
    progress: bool = True,
) -> FinetuneContext:
    """Everything a round needs, from the settings (what `crl finetune` and `crl run --finetune-auto` pass).

    Args:
        config: the fine-tuning settings (default: `finetune_config(settings)`).
        base: the base model (default: `llm.model`, else the embedded model).
        evaluator: the gate's evaluator; True builds `local_evaluator`, False none (no gate).
        progress: show progress bars while training.
    """
    from crl.agent.app import open_bank

    config = config or finetune_config(settings)
    if evaluator is True:
        evaluator = local_evaluator(settings, base, memory=config.gate_memory)
    return FinetuneContext(
        home=Path(settings.home),
        config=config,
        base_model=base_model_key(base or settings.llm.model),
        base_model_path=Path(base_model_path(settings, base)),
        open_bank=lambda: open_bank(settings, actor="finetune"),
        evaluator=evaluator or None,
        progress=progress,
    )


def round_report(seen: Check, record: RoundRecord | None) -> dict[str, Any]:
    """What one scheduler check saw and, if it ran one, how the round ended (`maybe_run_round`'s result)."""
    line: dict[str, Any] = {"new_episodes": seen.new_episodes, "threshold": seen.threshold}
    if record is not None:
        line |= {"round": record.round, "status": record.status, "steps": record.steps, "error": record.error}
    return line


def round_message(line: dict[str, Any]) -> str:
    """`round_report` as one line for people (rich markup)."""
    if "round" not in line:
        return f"fine-tuning: {line['new_episodes']}/{line['threshold']} new qualifying episodes; no round yet"
    error = f" - {line['error']}" if line["error"] else ""
    return f"fine-tuning round {line['round']}: [bold]{line['status']}[/] ({line['new_episodes']} new episodes){error}"


def round_if_due(settings: Settings, progress: bool = True) -> dict[str, Any]:
    """Check the fine-tuning scheduler once and run a round if one is due (`crl run --finetune-auto`)."""
    from crl.finetune.scheduler import maybe_run_round

    return round_report(*maybe_run_round(finetune_context(settings, progress=progress)))
