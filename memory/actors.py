"""Actors: which model (a base model and, optionally, a LoRA adapter) played an episode.

Experience is credited against the actor that used it, so that after a promotion the
credit learned under an older actor can be decayed (`memory.retrieval.actor_decay`). An
actor is written as one key, `<base>` or `<base>+<adapter id>`. Runs name the model as the
backend reports it (`smollm2-135m-instruct+sft-20260101-120000-ab12`, a hub id, a folder
name) and the adapter as its folder (`<home>/adapters/<id>/adapter`); the adapter registry
names the base model by `llm.model` and the adapter by its id. `actor_key` maps both to
the same key: the base's last path component, lower-cased, plus the adapter's id.

    >>> actor_key("smollm2-135m-instruct+sft-1", "/home/u/.crl/adapters/sft-1/adapter")
    'smollm2-135m-instruct+sft-1'
    >>> actor_key("HuggingFaceTB/SmolLM2-135M-Instruct", None)
    'smollm2-135m-instruct'
"""

from __future__ import annotations

from pathlib import Path, PurePath

ADAPTER_SUBDIR = "adapter"  # the registry's `<id>/adapter` layout (finetune.registry.ADAPTER_SUBDIR)


def adapter_ref(adapter: str | PurePath | None) -> str | None:
    """An adapter's id: the registry folder's name for `<id>/adapter`, the folder's name for
    any other path, the text itself for a bare id; None for no adapter."""
    if adapter is None or str(adapter) == "":
        return None
    path = PurePath(str(adapter).rstrip("/\\"))
    if path.name == ADAPTER_SUBDIR and path.parent.name:
        return path.parent.name
    return path.name


def base_name(model: str) -> str:
    """A base model's name as actors compare it: the last path component, lower-cased."""
    return PurePath(model.rstrip("/\\") or model).name.lower()


def actor_key(model: str, adapter: str | Path | None = None) -> str:
    """The actor key of `model` run with `adapter` (module docstring).

    A model name that already ends in "+<adapter id>" (what the local backend reports) is not
    given the adapter twice.
    """
    ref = adapter_ref(adapter)
    base = model
    if ref is not None and base.endswith("+" + ref):
        base = base[: -len(ref) - 1]
    elif ref is None and "+" in base:
        base, ref = base.split("+", 1)
    key = base_name(base) or "unknown"
    return key if ref is None else f"{key}+{ref}"


def actor_base(key: str) -> str:
    """The base model part of an actor key."""
    return key.split("+", 1)[0]


def credited_under_older_actor(record, current: str) -> bool:
    """Whether a record holds credit learned under an actor other than `current` of the same
    base model (or under an unknown actor: credit from before credit carried the actor)."""
    if record.effective_uses <= 0 or record.credit_actor == current:
        return False
    return record.credit_actor is None or actor_base(record.credit_actor) == actor_base(current)
