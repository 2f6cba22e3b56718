"""The chat protocol every backend implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, TypedDict, runtime_checkable


class Message(TypedDict):
    """One chat turn in the OpenAI / TRL conversational format."""

    role: str
    content: str


@dataclass
class GenerationConfig:
    """How to decode.

    Attributes:
        max_new_tokens: upper bound on generated tokens per reply.
        temperature: 0 means greedy decoding.
        top_p: nucleus sampling mass when sampling.
        stop: strings that end a reply; the reply is cut before the first one found.
        seed: makes sampling reproducible when set.
    """

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    seed: int | None = None


@dataclass
class Completion:
    """One generated reply with its accounting."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    finish_reason: str = "stop"


class LLMError(RuntimeError):
    """A backend failed in a way the user can act on; the message says how."""


@runtime_checkable
class ChatModel(Protocol):
    """A chat model with batched generation and its own token counter.

    A backend that continues a trailing assistant message (a primed reply) says so with a
    class attribute `supports_prefill = True`; the agent loop reads it with `getattr`.
    """

    name: str

    def generate(self, batch: list[list[Message]], config: GenerationConfig) -> list[Completion]:
        """One reply for each conversation in `batch`, in order."""
        ...

    def count_tokens(self, messages: list[Message]) -> int:
        """Tokens the prompt for `messages` takes, as this model counts them."""
        ...


def cut_at_stop(text: str, stop: list[str]) -> tuple[str, bool]:
    """Cut `text` before the earliest stop string; report whether one was found.

    Example: `cut_at_stop("Action: go\\nObs", ["\\nObs"])` returns `("Action: go", True)`.
    """
    cut = len(text)
    for s in stop:
        if s:
            i = text.find(s)
            if i != -1:
                cut = min(cut, i)
    return text[:cut], cut < len(text)
