"""Tokenise training examples exactly as TRL and the agent do, and check they agree.

Three things are checked for every example, and any failure is an error, never a warning:
the reply has tokens to learn from (TRL's completion mask is not all zero); the prompt
alone tokenises to a prefix of prompt + reply (else TRL silently trains on a shifted
context); and the tokens up to the primed marker (`Action:`) are the very tokens the local
backend feeds the model at inference (`LocalChatModel.render`, chat template plus prefix).
Lengths are measured on the way, so the maximum length can be chosen on purpose.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crl.finetune.errors import FinetuneError

Message = dict[str, str]
REPLY_MARKERS = ("Thought:", "Action:")


class TokenizationError(FinetuneError, ValueError):
    """An example would train on something other than what the agent sees, or on nothing."""


def load_tokenizer(model_path: str | Path):
    """The tokenizer of a local checkpoint folder (offline), with a pad token set."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(model_path), local_files_only=True)
    if tokenizer.chat_template is None:
        raise TokenizationError(f"{model_path} has no chat template; fine-tuning needs an instruct/chat model")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


class TokenizerCounter:
    """Counts tokens as `agent.llm.local.LocalChatModel.count_tokens` does (for prompt replay)."""

    def __init__(self, tokenizer, name: str):
        self.tokenizer = tokenizer
        self.name = name

    def render(self, messages: list[Message]) -> str:
        """The prompt text the local backend feeds the model (a trailing assistant message is a primed prefix)."""
        prefix = ""
        if messages and messages[-1]["role"] == "assistant":
            messages, prefix = messages[:-1], messages[-1]["content"]
        return self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True) + prefix

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def count_messages(self, messages: list[Message]) -> int:
        return len(self.encode(self.render(messages)))

    def count_text(self, text: str) -> int:
        return self.count_messages([{"role": "user", "content": text}])


def _ids(tokenizer, messages: list[Message], generation_prompt: bool) -> list[int]:
    out = tokenizer.apply_chat_template(
        messages, tokenize=True, return_dict=True, add_generation_prompt=generation_prompt
    )
    return list(out["input_ids"])


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass
class ExampleTokens:
    """Token counts of one prompt + reply pair as TRL will see it."""

    prompt: int
    completion: int

    @property
    def total(self) -> int:
        return self.prompt + self.completion


def tokenize_pair(tokenizer, prompt: list[Message], reply: list[Message]) -> ExampleTokens:
    """Tokenise `prompt` + `reply` the way TRL's conversational prompt-completion path does, and check it.

    Raises:
        TokenizationError: the reply has no tokens, the prompt is not a token prefix of the
            whole, or the context before the reply differs from the agent's inference prompt.
    """
    prompt_ids = _ids(tokenizer, prompt, generation_prompt=True)
    full_ids = _ids(tokenizer, prompt + reply, generation_prompt=False)
    shared = _common_prefix(prompt_ids, full_ids)
    if shared < len(prompt_ids):
        raise TokenizationError(
            "the chat template renders the prompt differently alone than followed by the reply "
            f"(they part at token {shared}: {tokenizer.decode(prompt_ids[shared:])!r}); TRL would train on a "
            "context the agent never sees. Use a prefix-preserving chat template."
        )
    completion = len(full_ids) - len(prompt_ids)
    if completion <= 0:
        raise TokenizationError(
            f"an example's reply {reply!r} has no tokens, so its loss mask is all zero; rebuild the dataset"
        )
    content = reply[-1]["content"]
    marker = next((m for m in REPLY_MARKERS if content.startswith(m)), None)
    if marker is not None:
        counter = TokenizerCounter(tokenizer, "")
        seen = counter.encode(counter.render(prompt + [{"role": "assistant", "content": marker}]))
        if full_ids[: len(seen)] != seen:
            at = _common_prefix(seen, full_ids)
            raise TokenizationError(
                "the training tokens before the reply differ from the agent's inference prompt at token "
                f"{at} ({tokenizer.decode(seen[at : at + 8])!r} vs {tokenizer.decode(full_ids[at : at + 8])!r}); "
                "the reply must continue the primed marker exactly (no space after 'Action:')"
            )
    return ExampleTokens(len(prompt_ids), completion)


@dataclass
class LengthReport:
    """Token lengths of a dataset and the examples too long to train on."""

    tokenizer: str
    count: int = 0
    prompt_p50: int = 0
    prompt_max: int = 0
    total_p50: int = 0
    total_p95: int = 0
    total_max: int = 0
    too_long: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return self.__dict__.copy()


def _pct(values: list[int], q: float) -> int:
    if not values:
        return 0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def measure_rows(tokenizer, rows: Sequence[dict[str, Any]], max_length: int, name: str = "") -> LengthReport:
    """Check every row (SFT `prompt`/`completion` or DPO `prompt`/`chosen`/`rejected`) and measure it.

    Rows longer than `max_length` are reported in `too_long` (indices) for the caller to drop.
    """
    prompts, totals, too_long = [], [], []
    for i, row in enumerate(rows):
        replies = [row[k] for k in ("completion", "chosen", "rejected") if k in row]
        sizes = [tokenize_pair(tokenizer, row["prompt"], reply) for reply in replies]
        longest = max(s.total for s in sizes)
        prompts.append(sizes[0].prompt)
        totals.append(longest)
        if longest > max_length:
            too_long.append(i)
    return LengthReport(
        tokenizer=name,
        count=len(rows),
        prompt_p50=_pct(prompts, 0.5),
        prompt_max=max(prompts, default=0),
        total_p50=_pct(totals, 0.5),
        total_p95=_pct(totals, 0.95),
        total_max=max(totals, default=0),
        too_long=too_long,
    )


def training_max_length(longest: int, cap: int, multiple: int = 8) -> int:
    """The max_length to give TRL: one more than the longest example, rounded up to `multiple`, within `cap`.

    The spare token makes truncation detectable: a prepared example as long as max_length was cut.

    Example:
        >>> training_max_length(301, 1024)
        304
        >>> training_max_length(304, 1024)
        312
    """
    return min(cap, -(-(longest + 1) // multiple) * multiple)
