"""`ScriptedModel`: a `ChatModel` test double that replies from a script."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from crl.agent.llm.base import BackendRefused, Completion, GenerationConfig, LLMError, Message, cut_at_stop

if TYPE_CHECKING:
    from crl.agent.llm.scoring import ActionDistribution

Script = list[str | Completion] | Callable[[list[Message]], str | Completion]

SCRIPTED_MISS_LOGPROB = -5.0
"""The log-likelihood `ScriptedModel.score_actions` gives a candidate its script does not name."""


@dataclass
class ScriptedCall:
    """One `generate` call as the model received it."""

    batch: list[list[Message]]
    config: GenerationConfig


class ScriptedModel:
    """A chat model whose replies are written in advance, for tests.

    Each conversation in a batch takes the next reply from the list, in order; or, when
    `replies` is a function, the reply is `replies(messages)` for that conversation. A reply
    may be a `Completion` (to script native tool calls: `Completion("", tool_calls=[...])`),
    returned as it is with the prompt's token count filled in. Stop
    sequences are applied as a real backend would (`cut_at_stop`); `max_new_tokens` is not.
    Every call is recorded in `.calls`. Safe to call from several threads.

    Token counts are approximate: whitespace-separated words.

    Example:
        >>> model = ScriptedModel(["Thought: look\\nAction: go north"])
        >>> model.generate([[{"role": "user", "content": "hi"}]], GenerationConfig())[0].text
        'Thought: look\\nAction: go north'
    """

    def __init__(
        self, replies: Script, name: str = "scripted", supports_prefill: bool = True, supports_tools: bool = False
    ) -> None:
        self.name = name
        self.supports_prefill = supports_prefill
        self.supports_tools = supports_tools
        self.calls: list[ScriptedCall] = []
        self._replies = replies if callable(replies) else list(replies)
        self._next = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ScriptedModel(name={self.name!r}, calls={len(self.calls)})"

    def generate(self, batch: list[list[Message]], config: GenerationConfig) -> list[Completion]:
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
            if isinstance(text, Completion):
                completions.append(replace(text, prompt_tokens=self.count_tokens(conversation)))
                continue
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

    def score_actions(
        self, batch: list[list[Message]], candidates: list[list[str]], temperature: float = 1.0
    ) -> list[ActionDistribution]:
        """The scripted reply as a preference over the candidates, for testing the posterior policy.

        Each conversation takes the next scripted reply (as `generate` would); the candidate it
        names (after an optional `Action:`) gets log-likelihood 0 and every other one
        `SCRIPTED_MISS_LOGPROB`, so the model's argmax is the scripted action. A reply may also
        be a JSON object of action -> log-likelihood, for exact distributions.
        """
        from crl.agent.llm.scoring import ActionScore, softmax_policy

        if len(batch) != len(candidates):
            raise LLMError(f"{len(batch)} prompts but {len(candidates)} candidate lists")
        batch = [[dict(m) for m in conversation] for conversation in batch]
        with self._lock:
            self.calls.append(ScriptedCall(batch=batch, config=GenerationConfig(max_new_tokens=0)))
            raw = self._replies_for(batch)
        out = []
        for conversation, text, actions in zip(batch, raw, candidates):
            text = text.text if isinstance(text, Completion) else text
            table = _logprob_table(text)
            if table is None:
                wanted = text.strip().removeprefix("Action:").strip().lower()
                table = {a: 0.0 if a.lower() == wanted else SCRIPTED_MISS_LOGPROB for a in actions}
            scores = [
                ActionScore(a, table.get(a, SCRIPTED_MISS_LOGPROB), table.get(a, SCRIPTED_MISS_LOGPROB), 1)
                for a in actions
            ]
            dist = softmax_policy(scores, temperature)
            out.append(replace(dist, prompt_tokens=self.count_tokens(conversation)))
        return out

    def count_tokens(self, messages: list[Message]) -> int:
        """Approximate prompt size: whitespace-separated words over all contents."""
        return sum(_word_count(m.get("content") or "") for m in messages)

    def _replies_for(self, batch: list[list[Message]]) -> list[str | Completion]:
        if callable(self._replies):
            return [self._replies(conversation) for conversation in batch]
        left = len(self._replies) - self._next
        if len(batch) > left:  # every later call would fail too: a run stops here, as if killed
            raise BackendRefused(
                f"ScriptedModel ran out of replies: {len(self._replies)} were scripted, "
                f"{self._next} used, and a batch of {len(batch)} asked for more; "
                "script more replies or pass a function."
            )
        replies = self._replies[self._next : self._next + len(batch)]
        self._next += len(batch)
        return replies


def _word_count(text: str) -> int:
    return len(text.split())


def _logprob_table(text: str) -> dict[str, float] | None:
    """A scripted reply written as a JSON object of action -> log-likelihood, else None."""
    text = text.strip()
    if not text.startswith("{"):
        return None
    try:
        table = json.loads(text)
    except json.JSONDecodeError:
        return None
    return {str(k): float(v) for k, v in table.items()} if isinstance(table, dict) else None
