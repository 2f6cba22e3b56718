"""The agent's side of the reflector: its settings, its model, and the runner hook.

    reflector = make_reflector(settings, bank, acting_model)   # None when reflection is off
    hooks.append(reflector.on_episode_end)                     # reflect every N episodes

The reflecting model is the acting one unless `reflect.model` (`--reflect-model`) or
`reflect.base_url` names another, e.g. a stronger model behind an OpenAI-compatible
server; it is built by `build_chat_model` from a copy of the settings whose `llm.model`
and `llm.base_url` are replaced (and without the acting model's LoRA adapter).
"""

from __future__ import annotations

from typing import Any

from crl.agent.config import Settings
from crl.agent.llm.base import ChatModel
from crl.agent.llm.factory import EMBEDDED_LABEL, build_chat_model, choose_model
from crl.memory.reflection.config import ReflectorConfig
from crl.memory.reflection.reflector import Reflector

EMBEDDED_PRIME = "ADD: Always"


def reflect_config(settings: Settings, model_settings: Settings | None = None) -> ReflectorConfig:
    """`settings.reflect` (the defaults while the settings have no such section), with an unset
    `prime` resolved for the reflecting model: `EMBEDDED_PRIME` for the embedded 135M model
    (measured: it answers the prompt with prose, or copies its format line, unless its reply
    is started for it), none for others.

    Args:
        model_settings: the settings the reflecting model is built from (`reflect_settings`),
            when it is not the acting model.
    """
    config = getattr(settings, "reflect", None)
    config = config if isinstance(config, ReflectorConfig) else ReflectorConfig()
    if config.prime is None:
        embedded = choose_model((model_settings or settings).llm).model == EMBEDDED_LABEL
        config = config.model_copy(update={"prime": EMBEDDED_PRIME if embedded else ""})
    return config


def reflect_settings(
    settings: Settings, reflect_model: str | None = None, base_url: str | None = None
) -> Settings | None:
    """The settings the reflecting model is built from, or None when it is the acting model.

    Args:
        reflect_model: overrides `reflect.model` (the `--reflect-model` flag).
        base_url: overrides `reflect.base_url`.
    """
    config = reflect_config(settings)
    model = reflect_model or config.model
    url = base_url or config.base_url
    if not model and not url:
        return None
    update: dict[str, Any] = {"model": model or settings.llm.model, "adapter": None}
    if url:
        update.update(base_url=url, backend="openai" if settings.llm.backend == "local" else settings.llm.backend)
    return settings.model_copy(update={"llm": settings.llm.model_copy(update=update)})


def build_reflect_model(
    settings: Settings,
    acting_model: ChatModel | None = None,
    reflect_model: str | None = None,
    base_url: str | None = None,
) -> ChatModel:
    """The model that reflects: a separate one when configured, else `acting_model` (built from
    the settings when not given)."""
    separate = reflect_settings(settings, reflect_model, base_url)
    if separate is not None:
        return build_chat_model(separate)
    return acting_model if acting_model is not None else build_chat_model(settings)


def make_reflector(
    settings: Settings,
    bank,
    acting_model: ChatModel | None = None,
    reflect_model: str | None = None,
    enabled: bool | None = None,
) -> Reflector | None:
    """The reflector for `crl run`'s episode-end hook, or None when automatic reflection is off
    (`reflect.enabled = false`, `--no-reflect`, or `reflect.every = 0`).

    Args:
        enabled: overrides `reflect.enabled` (False for `--no-reflect`).
    """
    config = reflect_config(settings)
    on = config.enabled if enabled is None else enabled
    if not on or config.every <= 0:
        return None
    model = build_reflect_model(settings, acting_model, reflect_model)
    resolved = reflect_config(settings, reflect_settings(settings, reflect_model))
    return Reflector(bank, model, resolved.model_copy(update={"enabled": True}))
