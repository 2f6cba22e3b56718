"""The small public Python API: run an agent, open the bank, retrieve, build a dataset, train a round.

Each function is a thin front to the same library code the `crl` command line uses, so a
script and the CLI always agree. Settings come from `crl.settings()` (defaults < crl.toml <
`CRL_*` environment < the arguments given), exactly as the CLI's layers.

    import crl

    cfg = crl.settings(home=".crl-demo")
    result = crl.run("keyroom/key", episodes=8, settings=cfg)
    print(result.report()["success_rate"])
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from crl.agent.app import RunResult
    from crl.agent.config import Settings
    from crl.agent.llm.base import ChatModel
    from crl.agent.retries import RetryResult
    from crl.finetune.registry import Lineage
    from crl.memory.bank import ExperienceBank
    from crl.memory.retrieval.retriever import ContextPack


def settings(home: str | Path | None = None, config_file: str | Path | None = None, **sections: Any) -> "Settings":
    """The effective settings: defaults < TOML file < `CRL_*` environment < these arguments.

    Args:
        home: the data directory (runs, memory, adapters, datasets).
        config_file: a TOML file (default `./crl.toml` or `$CRL_CONFIG`).
        **sections: nested overrides by section, e.g. `agent={"parallel": 4}`, `llm={"dtype": "bf16"}`.
    """
    from crl.agent.config import load_settings

    overrides: dict[str, Any] = dict(sections)
    if home is not None:
        overrides["home"] = Path(home)
    return load_settings(overrides, config_file)


def run(
    task: str,
    episodes: int = 8,
    *,
    settings: "Settings | None" = None,
    fold: str = "train",
    seed_start: int = 0,
    model: "ChatModel | None" = None,
) -> "RunResult":
    """Play `episodes` episodes of `task` and store what happened in the bank (as `crl run`).

    Args:
        task: a registered task, `family/variant` (see `crl tasks`).
        episodes: how many episodes, on consecutive seeds of `fold`.
        settings: from `crl.settings()`; defaults when None.
        fold: train (experience goes to memory), dev or test.
        seed_start: skip this many seeds of the fold first.
        model: a chat model to act with; None builds the configured one (the embedded default).

    Returns:
        The run: `.report()` has the success rate with its 95% interval, `.episodes` the trajectories.
    """
    from crl.agent.app import start_run

    return start_run(settings or _default_settings(), task, episodes, fold=fold, seed_start=seed_start, model=model)


def evaluate(
    task: str,
    episodes: int = 16,
    *,
    settings: "Settings | None" = None,
    fold: str = "dev",
    seed_start: int = 0,
    model: "ChatModel | None" = None,
) -> "RunResult":
    """Play held-out episodes (dev or test fold) that read memory but never change it (as `crl eval`).

    `seed_start` skips that many seeds of the fold first, so a larger evaluation can be added in slices.
    """
    from crl.agent.app import start_run

    _held_out(fold, "evaluate")
    return start_run(
        settings or _default_settings(), task, episodes, fold=fold, kind="eval", seed_start=seed_start, model=model
    )


def evaluate_with_retries(
    task: str,
    episodes: int = 16,
    attempts: int = 2,
    *,
    settings: "Settings | None" = None,
    fold: str = "dev",
    seed_start: int = 0,
    model: "ChatModel | None" = None,
    first: str | None = None,
    resume: bool = False,
    retry_memory: str = "attempts",
) -> "RetryResult":
    """Held-out episodes with retries (as `crl eval --attempts`): each lost seed is played again,
    up to `attempts` in all, the retries reading a scratch memory that holds the earlier
    attempts; `.report()["solved_within"]` counts the seeds any attempt won. `first`: a finished
    evaluation's run id taken as attempt 1; `resume`: continue its latest, interrupted retries;
    `retry_memory`: "attempts" (the default) reads only the earlier attempts, so `first` may be an
    evaluation played without memory (the model alone, retried with memory of its own attempts);
    "bank" reads a copy of the bank as well."""
    from crl.agent.retries import evaluate_with_retries as _retries

    _held_out(fold, "evaluate_with_retries")
    return _retries(
        settings or _default_settings(),
        task,
        episodes,
        attempts,
        fold,
        seed_start,
        model=model,
        first=first,
        resume=resume,
        retry_memory=retry_memory,
    )


def _held_out(fold: str, function: str) -> None:
    """Refuse the train fold for an evaluation (`function` names the caller in the message)."""
    if fold == "train":
        raise ValueError(f"{function} plays held-out seeds: use fold='dev' or 'test' (crl.run plays train seeds)")


def open_bank(settings: "Settings | None" = None) -> "ExperienceBank":
    """The experience bank of the settings' data directory (embedded, or the Chroma server at memory.url).

    Use it as a context manager: an embedded bank holds its directory's lock until closed.
    """
    from crl.agent.app import open_bank as _open

    return _open(settings or _default_settings())


def retrieve(
    bank: "ExperienceBank",
    task: str,
    goal: str,
    observation: str,
    *,
    history: Sequence[str] = (),
    admissible: Sequence[str] | None = None,
    settings: "Settings | None" = None,
) -> "ContextPack":
    """What memory offers an agent in one state: similar successes and failures, hints, rules, action values.

    Args:
        bank: an open bank (`crl.open_bank`).
        task: `family/variant`; candidates come from the same family.
        goal: the episode's goal text.
        observation: the current observation.
        history: the actions taken so far, oldest first.
        admissible: the actions the task accepts now (enables action values).
        settings: retrieval weights and slot sizes (`settings.retrieval`); defaults when None.
    """
    from crl.memory.retrieval.retriever import RetrievalQuery, Retriever

    cfg = (settings or _default_settings()).retrieval
    query = RetrievalQuery(
        family=task.split("/", 1)[0],
        task=task,
        goal=goal,
        observation=observation,
        history=list(history),
        admissible=list(admissible) if admissible is not None else None,
    )
    return Retriever(bank, cfg).retrieve([query])[0]


def build_dataset(
    kind: str = "sft",
    *,
    settings: "Settings | None" = None,
    family: str | None = None,
    tasks: Sequence[str] | None = None,
    out_dir: str | Path | None = None,
) -> Path:
    """Build an SFT or DPO dataset from the bank (as `crl dataset build`) and return its folder.

    Rows follow TRL's conventions (prompt/completion for SFT, prompt/chosen/rejected for DPO);
    a `card.json` beside them records what went in and what was filtered out.
    """
    from crl.agent.finetuning import finetune_context
    from crl.finetune.rounds import make_dataset

    ctx = finetune_context(settings or _default_settings(), evaluator=False, progress=False)
    return make_dataset(
        ctx, kind, family=family, tasks=list(tasks) if tasks else None, out_dir=Path(out_dir) if out_dir else None
    )


def train_round(
    dataset: str | Path,
    *,
    settings: "Settings | None" = None,
    kind: str = "sft",
    from_adapter: str | None = None,
) -> "Lineage":
    """Train a LoRA adapter on a dataset with TRL + PEFT and register it (as `crl finetune sft|dpo`).

    The adapter is registered, not promoted: `crl adapters promote ID` (or the gate of
    `crl finetune auto`) decides whether agents use it.
    """
    from crl.agent.finetuning import finetune_context
    from crl.finetune.rounds import train_and_register

    ctx = finetune_context(settings or _default_settings(), evaluator=False, progress=False)
    result, lineage = train_and_register(ctx, kind, dataset_dir=Path(dataset), from_adapter=from_adapter)
    if lineage is None:
        raise RuntimeError(f"training stopped before it finished (job folder: {result.adapter_dir})")
    return lineage


def _default_settings() -> "Settings":
    from crl.agent.config import load_settings

    return load_settings()
