"""Pick and build the chat model the settings ask for, and say why."""

from __future__ import annotations

from dataclasses import dataclass

from crl.agent.config import LLMSettings, Settings
from crl.agent.llm.base import ChatModel

EMBEDDED_LABEL = "embedded SmolLM2-135M-Instruct"


@dataclass
class ModelChoice:
    """Which backend and model would be used, and the reason."""

    backend: str
    model: str
    adapter: str | None
    reason: str


def choose_model(llm: LLMSettings) -> ModelChoice:
    """Resolve `backend = auto` and an unset model into a concrete choice."""
    backend = llm.backend
    if backend == "auto":
        if llm.base_url:
            backend, why = "openai", "llm.base_url is set"
        else:
            backend, why = "local", "no llm.base_url, so the local transformers backend"
    else:
        why = f"llm.backend = {backend}"
    if backend == "openai":
        if not llm.model:
            raise ValueError(
                "the openai backend needs a model name: set llm.model (crl.toml), CRL_LLM__MODEL or --model"
            )
        return ModelChoice("openai", llm.model, None, f"{why}; endpoint {llm.base_url or 'OpenAI'}")
    if llm.model:
        return ModelChoice("local", llm.model, llm.adapter, f"{why}; llm.model = {llm.model}")
    return ModelChoice(
        "local", EMBEDDED_LABEL, llm.adapter, f"{why}; no model configured, so the embedded default (offline)"
    )


def build_chat_model(settings: Settings) -> ChatModel:
    """Instantiate the model `choose_model` picks."""
    llm = settings.llm
    choice = choose_model(llm)
    if choice.backend == "openai":
        from crl.agent.llm.openai_backend import OpenAIChatModel

        return OpenAIChatModel(
            model=choice.model,
            base_url=llm.base_url,
            api_key=llm.api_key.get_secret_value() if llm.api_key else None,
            api_key_env=llm.api_key_env,
            timeout=llm.timeout_s,
            max_retries=llm.max_retries,
        )
    from crl.agent.llm.local import LocalChatModel
    from crl.finetune.registry import adapter_folder, promoted_adapter_path

    adapter = adapter_folder(settings, llm.adapter) if llm.adapter else promoted_adapter_path(settings, llm.model)
    model_path = llm.model
    if model_path is None:
        from crl.agent.llm.embedded import embedded_model_path

        model_path = embedded_model_path(settings.models_dir)
    return LocalChatModel(
        model=model_path,
        adapter=str(adapter) if adapter else None,
        device=llm.device,
        dtype=llm.dtype,
        cache_dir=settings.models_dir,
    )
