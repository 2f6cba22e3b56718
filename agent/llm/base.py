"""The chat protocol every backend implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NotRequired, Protocol, TypedDict, runtime_checkable


class Message(TypedDict):
    """One chat turn in the OpenAI / TRL conversational format.

    An assistant turn that called tools carries `tool_calls` (OpenAI's form:
    `[{"id", "type": "function", "function": {"name", "arguments"}}]`); a tool's answer is a
    turn with role "tool", its `tool_call_id` and the tool's `name`.
    """

    role: str
    content: str
    tool_calls: NotRequired[list[dict[str, Any]]]
    tool_call_id: NotRequired[str]
    name: NotRequired[str]


@dataclass
class ToolCall:
    """A tool call a model made natively (through its API's `tool_calls`).

    Attributes:
        id: the call's id, which the tool's answer refers to.
        name: the tool called.
        arguments: the arguments as the model wrote them (JSON text, not yet parsed).
    """

    id: str
    name: str
    arguments: str = "{}"


@dataclass
class GenerationConfig:
    """How to decode.

    Attributes:
        max_new_tokens: upper bound on generated tokens per reply.
        temperature: 0 means greedy decoding.
        top_p: nucleus sampling mass when sampling.
        stop: strings that end a reply; the reply is cut before the first one found.
        seed: makes sampling reproducible when set.
        tools: tool definitions (`{"type": "function", "function": {...}}`) offered for native
            tool calling; None offers none (a backend without native tool calls ignores them).
    """

    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    tools: list[dict[str, Any]] | None = None


@dataclass
class Completion:
    """One generated reply with its accounting (and the tool calls it made natively, if any)."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    finish_reason: str = "stop"
    tool_calls: list[ToolCall] = field(default_factory=list)


class LLMError(RuntimeError):
    """A backend failed in a way the user can act on; the message says how."""


class BackendRefused(LLMError):
    """The backend refuses every request alike (authentication, permission, an unknown model or
    route): retrying or going on to the next step cannot help, so a run stops at once."""


class BatchError(LLMError):
    """Some conversations of a batch got no reply (after the backend's retries).

    Attributes:
        results: per conversation, its reply, or None where it failed.
        errors: per conversation, why it failed, or None where it got a reply.
    """

    def __init__(self, message: str, results: list[Completion | None], errors: list[str | None]) -> None:
        super().__init__(message)
        self.results = results
        self.errors = errors


@runtime_checkable
class ChatModel(Protocol):
    """A chat model with batched generation and its own token counter.

    A backend that continues a trailing assistant message (a primed reply) says so with a
    class attribute `supports_prefill = True`; the agent loop reads it with `getattr`. One that
    calls tools natively (`GenerationConfig.tools` in, `Completion.tool_calls` out) says so with
    `supports_tools = True`; the loop falls back to tool calls written as text otherwise.
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
