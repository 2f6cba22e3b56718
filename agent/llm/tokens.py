"""Chat token counting the way OpenAI models count it, via tiktoken.

tiktoken downloads its encoding files the first time an encoding is used and caches them in
`$TIKTOKEN_CACHE_DIR` (default: `<tmp>/data-gym-cache`). Offline, that download fails; the
counter then falls back to an approximation of 4 characters per token and logs one warning. For
exact counts on an offline machine, run any tiktoken encoding once on a machine with internet
with `TIKTOKEN_CACHE_DIR` set to a folder, copy that folder over, and point
`TIKTOKEN_CACHE_DIR` at it.
"""

from __future__ import annotations

import json
import logging
import math
import threading

import tiktoken

from crl.agent.llm.base import Message

log = logging.getLogger(__name__)

# The chat format's framing, from OpenAI's cookbook ("How to count tokens with tiktoken"):
# each message is wrapped as <|start|>{role}<|message|>{content}<|end|>, and every reply
# is primed with <|start|>assistant<|message|>.
TOKENS_PER_MESSAGE = 3
TOKENS_PER_REPLY = 3
CHARS_PER_TOKEN = 4
DEFAULT_ENCODING = "o200k_base"
LOAD_TIMEOUT_S = 10.0

_encodings: dict[str, tiktoken.Encoding | None] = {}
_encodings_lock = threading.Lock()


def encoding_name_for(model: str) -> str:
    """tiktoken's encoding for an OpenAI model name; `o200k_base` for any other model.

    Models served by vLLM, Ollama or llama.cpp have their own tokenizers, so counts for
    them are estimates either way.
    """
    try:
        return tiktoken.encoding_name_for_model(model)
    except KeyError:
        return DEFAULT_ENCODING


def load_encoding(name: str, timeout_s: float = LOAD_TIMEOUT_S) -> tiktoken.Encoding | None:
    """The tiktoken encoding `name`, or None when its files cannot be read or fetched.

    Tries once per process and remembers the outcome. tiktoken fetches without a
    timeout, so the attempt runs in a daemon thread abandoned after `timeout_s`; without
    this, a firewall that drops packets would hang the caller.
    """
    with _encodings_lock:
        if name in _encodings:
            return _encodings[name]
        found: list[tiktoken.Encoding] = []
        errors: list[BaseException] = []

        def attempt() -> None:
            try:
                found.append(tiktoken.get_encoding(name))
            except Exception as exc:  # tiktoken raises requests, OS and value errors alike
                errors.append(exc)

        worker = threading.Thread(target=attempt, name=f"tiktoken-{name}", daemon=True)
        worker.start()
        worker.join(timeout_s)
        encoding = found[0] if found else None
        if encoding is None:
            reason = f"{type(errors[0]).__name__}" if errors else f"no answer in {timeout_s:g} s"
            _warn_approximate(name, reason)
        _encodings[name] = encoding
        return encoding


def _warn_approximate(name: str, reason: str) -> None:
    message = (
        f"tiktoken could not load encoding {name!r} ({reason}); token counts are estimated "
        f"as {CHARS_PER_TOKEN} characters per token. For exact counts offline, set "
        "TIKTOKEN_CACHE_DIR to a folder holding tiktoken's cached encoding files (fill it "
        "by running tiktoken once with internet and the same TIKTOKEN_CACHE_DIR)."
    )
    log.warning(message)


class TiktokenCounter:
    """Counts chat prompt tokens as OpenAI chat models do.

    Args:
        model: the model name; picks the tiktoken encoding.
        encoding: an encoding to use instead of loading one (tests, custom tokenizers).

    Example:
        >>> counter = TiktokenCounter("gpt-4o")
        >>> counter.count([{"role": "user", "content": "hello"}])  # 3 + 1 + 1 + 3
        8
    """

    def __init__(self, model: str, encoding: tiktoken.Encoding | None = None) -> None:
        self.model = model
        self.encoding_name = encoding.name if encoding else encoding_name_for(model)
        self._encoding = encoding
        self._loaded = encoding is not None

    def __repr__(self) -> str:
        return f"TiktokenCounter(model={self.model!r}, encoding={self.encoding_name!r})"

    @property
    def exact(self) -> bool:
        """True when counts come from tiktoken, False when they are estimates."""
        return self._get_encoding() is not None

    def count(self, messages: list[Message]) -> int:
        """Prompt tokens for `messages`, including the chat format's framing."""
        return TOKENS_PER_REPLY + sum(
            TOKENS_PER_MESSAGE
            + self.count_text(m["role"])
            + self.count_text(m.get("content") or "")
            + (self.count_text(json.dumps(m["tool_calls"])) if m.get("tool_calls") else 0)
            for m in messages
        )

    def count_text(self, text: str) -> int:
        """Tokens in plain `text` (no chat framing)."""
        encoding = self._get_encoding()
        if encoding is None:
            return math.ceil(len(text) / CHARS_PER_TOKEN)
        return len(encoding.encode(text, disallowed_special=()))

    def _get_encoding(self) -> tiktoken.Encoding | None:
        # Loaded on first use so constructing a backend never touches the network.
        if not self._loaded:
            self._encoding = load_encoding(self.encoding_name)
            self._loaded = True
        return self._encoding
