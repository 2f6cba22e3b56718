"""`ScriptedModel`: a `ChatModel` test double that replies from a script."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from agent.llm.base import Completion, GenerationConfig, LLMError, Message, cut_at_stop

Script = list[str] | Callable[[list[Message]], str]


@dataclass
class ScriptedCall:
    """One `generate` call as the model received it."""

    batch: list[list[Message]]
    config: GenerationConfig


class ScriptedModel:
    """A chat model whose replies are written in advance, for tests.

    Each conversation in a batch takes the next reply from the list, in order; or, when
    `replies` is a function, the reply is `replies(messages)` for that conversation. Stop
    sequences are applied as a real backend would (`cut_at_stop`); `max_new_tokens` is not.
    Every call is recorded in `.calls`. Safe to call from several threads.

    Token counts are approximate: whitespace-separated words.

    Example:
        >>> model = ScriptedModel(["Thought: look\\nAction: go north"])
        >>> model.generate([[{"role": "user", "content": "hi"}]], GenerationConfig())[0].text
        'Thought: look\\nAction: go north'
    """

    def __init__(self, replies: Script, name: str = "scripted", supports_prefill: bool = True) -> None:
        self.name = name
        self.supports_prefill = supports_prefill
        self.calls: list[ScriptedCall] = []
        self._replies = replies if callable(replies) else list(replies)
        self._next = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ScriptedModel(name={self.name!r}, calls={len(self.calls)})"

    def generate(
        self, batch: list[list[Message]], config: GenerationConfig
    ) -> list[Completion]:
        """One scripted reply per conversation in `batch`, in order.

        Raises:
            LLMError: the list of replies is used up.
        """
        batch = [[dict(m) for m in conversation] for conversation in batch]
        with self._lock:
            self.calls.append(ScriptedCall(batch=batch, config=config))
            raw = self._replies_for(batch)
        completions = []
        for conversation, text in zip(batch, raw):
            text, _ = cut_at_stop(text, config.stop)
            completions.append(
                Completion(
                    text=text,
                    prompt_tokens=self.count_tokens(conversation),
                    completion_tokens=_word_count(text),
                    finish_reason="stop",
                )
            )
        return completions

    def count_tokens(self, messages: list[Message]) -> int:
        """Approximate prompt size: whitespace-separated words over all contents."""
        return sum(_word_count(m["content"]) for m in messages)

    def _replies_for(self, batch: list[list[Message]]) -> list[str]:
        if callable(self._replies):
            return [self._replies(conversation) for conversation in batch]
        left = len(self._replies) - self._next
        if len(batch) > left:
            raise LLMError(
                f"ScriptedModel ran out of replies: {len(self._replies)} were scripted, "
                f"{self._next} used, and a batch of {len(batch)} asked for more; "
                "script more replies or pass a function."
            )
        replies = self._replies[self._next : self._next + len(batch)]
        self._next += len(batch)
        return replies


def _word_count(text: str) -> int:
    return len(text.split())
