"""A chat model built on first use: the random baseline plays listed actions without a model, so
`crl run --policy random` neither loads nor converts one unless something asks it to generate."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from crl.agent.llm.base import ChatModel, Completion, GenerationConfig, Message

if TYPE_CHECKING:
    from crl.agent.llm.scoring import ActionDistribution


class DeferredModel:
    """Stands in for the model `build` makes, and makes it the first time it is needed.

    Args:
        build: makes the real model (e.g. `lambda: build_chat_model(settings)`).
        name: the name reported before the model is built.
        supports_prefill: whether the real model continues a partial assistant message.
        supports_tools: whether the real model calls tools natively.
        primes_tool_calls: whether text-mode tool calls are primed by default (`agent.tool_choice` auto).
    """

    adapter = None

    def __init__(
        self,
        build: Callable[[], ChatModel],
        name: str,
        supports_prefill: bool,
        supports_tools: bool = False,
        primes_tool_calls: bool = False,
    ) -> None:
        self._build = build
        self._model: ChatModel | None = None
        self._lock = threading.Lock()
        self._name = name
        self.supports_prefill = supports_prefill
        self.supports_tools = supports_tools
        self.primes_tool_calls = primes_tool_calls

    @property
    def loaded(self) -> bool:
        """Whether the real model has been built."""
        return self._model is not None

    @property
    def name(self) -> str:
        return getattr(self._model, "name", self._name) if self._model is not None else self._name

    def model(self) -> ChatModel:
        """The real model, built now if it was not yet."""
        with self._lock:
            if self._model is None:
                self._model = self._build()
            return self._model

    def generate(self, batch: list[list[Message]], config: GenerationConfig) -> list[Completion]:
        """The real model's replies (building it first)."""
        return self.model().generate(batch, config)

    def score_actions(
        self, batch: list[list[Message]], candidates: list[list[str]], temperature: float = 1.0
    ) -> list[ActionDistribution]:
        """The real model's action scores (building it first)."""
        return self.model().score_actions(batch, candidates, temperature)  # type: ignore[attr-defined]

    def count_tokens(self, messages: list[Message]) -> int:
        """The real model's token count (building it first)."""
        return self.model().count_tokens(messages)

    def scoring_report(self) -> dict[str, Any]:
        report = getattr(self._model, "scoring_report", None)
        return report() if callable(report) else {"method": "log-likelihood", "where": type(self._model).__name__}

    def close(self) -> None:
        close = getattr(self._model, "close", None)
        if callable(close):
            close()
