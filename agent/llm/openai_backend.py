"""The `openai` backend: any OpenAI-compatible chat server through the official SDK.

Works with OpenAI itself and with vLLM, Ollama and llama.cpp servers (set `base_url`).
Retries are the SDK's own: exponential backoff (0.5 s doubling, at most 8 s, with jitter,
or the server's `retry-after(-ms)` header) on connection errors, timeouts, 408, 409, 429
and 5xx; other 4xx answers fail at once.

Reply priming (a trailing assistant message that the reply must continue) is a feature
of the local backend. OpenAI-compatible servers treat a trailing assistant message in
different ways, so this backend drops it from the request and returns the server's
reply as is; the agent's parser accepts both forms.

Native tool calling: when `GenerationConfig.tools` is set, the request offers them (`tools`,
`tool_choice="auto"`) and the reply's `tool_calls` come back in `Completion.tool_calls`;
conversations may hold assistant turns with `tool_calls` and `tool` turns, sent as they are.
OpenAI, vLLM (with `--enable-auto-tool-choice`), Ollama and llama.cpp (`--jinja`) serve them.

Scoring admissible actions (`score_actions`, the posterior policy) goes through the first
method the server offers: transformers' `/v1/systemone`, vLLM's `prompt_logprobs`, or k
sampled replies mapped onto the actions (`agent.llm.served_scoring`); `scoring_method` and
`scoring_report()` say which was used.
"""

from __future__ import annotations

import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Literal

import httpx
import openai

from crl.agent.llm.base import (
    BackendRefused,
    BatchError,
    Completion,
    GenerationConfig,
    LLMError,
    Message,
    ToolCall,
    cut_at_stop,
)
from crl.agent.llm.served_scoring import ServedEndpointError, ServedScorer, ServedScoringOptions
from crl.agent.llm.tokens import TiktokenCounter
from crl.agent.redaction import environment_secrets, redact_text, redact_url, url_secrets

if TYPE_CHECKING:
    from crl.agent.llm.scoring import ActionDistribution

log = logging.getLogger(__name__)

REFUSING_STATUSES = frozenset({401, 403, 404})
"""Answers that every later request would get too (a wrong key, no access, no such model or route)."""
MAX_STOP_STRINGS = 4  # the API rejects more; the rest are applied locally
NO_KEY_PLACEHOLDER = "not-needed"


class _Secret:
    """Holds a key so that no repr, log line or traceback variable dump shows it."""

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "***"

    __str__ = __repr__


class OpenAIChatModel:
    """A `ChatModel` served over the OpenAI chat-completions API.

    Replies cannot be primed (`supports_prefill = False`): a trailing assistant message is
    dropped from the request.

    Args:
        model: the model name the server knows (also this backend's `name`).
        base_url: the server's API root, e.g. `http://127.0.0.1:8000/v1`; None means
            `$OPENAI_BASE_URL`, or OpenAI itself when that is unset too.
        api_key: the key; when None it is read from `$<api_key_env>`. A server at a
            `base_url` may need none.
        api_key_env: the environment variable holding the key.
        timeout: seconds to wait for one reply before retrying.
        max_retries: retries after the first try, with the SDK's backoff.
        extra_headers: headers sent with every request (e.g. for a proxy).
        concurrency: requests in flight at once for one batch.
        max_tokens_param: the request field for the reply length; OpenAI's reasoning
            models require `max_completion_tokens`, older servers know only `max_tokens`.
        scoring: how `score_actions` scores candidates: the methods to try and the sampling
            settings (`ServedScoringOptions`; its defaults when None).

    Raises:
        LLMError: no key is available for OpenAI itself.
    """

    supports_prefill = False
    supports_tools = True

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60,
        max_retries: int = 3,
        extra_headers: dict[str, str] | None = None,
        concurrency: int = 8,
        max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens",
        scoring: ServedScoringOptions | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.name = model
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        self.timeout = timeout
        self.max_retries = max_retries
        self.concurrency = concurrency
        self.max_tokens_param = max_tokens_param
        self._key_source = "the api_key argument" if api_key else f"${api_key_env}"
        key = api_key or os.environ.get(api_key_env)
        if not key:
            if self.base_url is None:
                raise LLMError(
                    f"openai backend: no API key for model {model!r}; set ${api_key_env} "
                    "(or pass api_key=), or set base_url= to use a local server that needs none"
                )
            key = NO_KEY_PLACEHOLDER
        self._key = _Secret(key)
        self._client = openai.OpenAI(
            api_key=key,
            base_url=self.base_url,
            timeout=timeout,
            max_retries=max_retries,
            default_headers=extra_headers,
        )
        self._counter = TiktokenCounter(model)
        self._scorer = ServedScorer(self, scoring)

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.name!r}, base_url={self._where()!r})"

    def generate(self, batch: list[list[Message]], config: GenerationConfig) -> list[Completion]:
        """One reply per conversation in `batch`, in order, sent concurrently.

        Raises:
            LLMError: the one request of a batch of one failed after the SDK's retries; the
                message says why.
            BatchError: some requests of a larger batch failed; it holds the replies that came
                back and each failure's reason, so the others are not lost.
        """
        if len(batch) <= 1:
            return [self._complete(messages, config) for messages in batch]

        def attempt(messages: list[Message]) -> tuple[Completion | None, str | None]:
            try:
                return self._complete(messages, config), None
            except BackendRefused:
                raise
            except LLMError as exc:
                return None, str(exc)

        workers = min(self.concurrency, len(batch))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="openai") as pool:
            outcomes = list(pool.map(attempt, batch))
        errors = [e for _, e in outcomes]
        failed = [e for e in errors if e is not None]
        if failed:
            raise BatchError(
                f"{len(failed)} of {len(batch)} requests failed; the first: {failed[0]}",
                [c for c, _ in outcomes],
                errors,
            )
        return [c for c, _ in outcomes]  # type: ignore[misc]

    def score_actions(
        self, batch: list[list[Message]], candidates: list[list[str]], temperature: float = 1.0
    ) -> list[ActionDistribution]:
        """pi_model(a | s) over each conversation's candidate actions, scored by the server.

        The method is the first of `/v1/systemone`, vLLM's `prompt_logprobs` and k sampled
        replies that the server offers, probed on the first call and kept
        (`agent.llm.served_scoring`; `scoring_method` names it).

        Raises:
            LLMError: a request failed after the SDK's retries, or no method can score a state.
        """
        return self._scorer.score(batch, candidates, temperature)

    @property
    def scoring_method(self) -> str | None:
        """How `score_actions` scores: "systemone", "prompt_logprobs" or "sampling" (None before its first call)."""
        return self._scorer.method

    def scoring_report(self) -> dict[str, Any]:
        """For `run.json`: the scoring method, what each probe found, decisions per method."""
        return self._scorer.report()

    def post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST `body` to `path` under the API root (e.g. "/systemone") with the SDK's timeouts
        and retries; the JSON answer.

        Raises:
            ServedEndpointError: the server answered with an error status (`status` holds it).
            LLMError: no answer after the retries, or the answer is not a JSON object.
        """
        try:
            answer = self._client.post(path, cast_to=object, body=body)
        except openai.APIStatusError as exc:
            raise ServedEndpointError(self._scrub(self._explain(exc)), exc.status_code) from None
        except openai.OpenAIError as exc:
            raise LLMError(self._scrub(self._explain(exc))) from None
        if not isinstance(answer, dict):
            raise LLMError(f"openai backend: {self._where()}{path} answered {type(answer).__name__}, not a JSON object")
        return answer

    def complete(self, messages: list[Message], config: GenerationConfig) -> Completion:
        """One reply to one conversation (`generate` for a batch of one).

        Raises:
            LLMError: the request failed after the SDK's retries.
        """
        return self._complete(messages, config)

    def count_tokens(self, messages: list[Message]) -> int:
        """Prompt tokens by tiktoken (estimated when its files are unavailable offline)."""
        return self._counter.count(messages)

    def close(self) -> None:
        """Close the HTTP connections."""
        self._client.close()

    def __enter__(self) -> OpenAIChatModel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _complete(self, messages: list[Message], config: GenerationConfig) -> Completion:
        sent = _without_priming(messages)
        started = time.perf_counter()
        try:
            response = self._client.chat.completions.create(**self._request(sent, config))
        except openai.OpenAIError as exc:
            refused = isinstance(exc, openai.APIStatusError) and exc.status_code in REFUSING_STATUSES
            raise (BackendRefused if refused else LLMError)(self._scrub(self._explain(exc))) from None
        except (httpx.HTTPError, ValueError) as exc:  # a body cut short or not JSON
            raise LLMError(self._scrub(f"openai backend: unreadable answer from {self._where()}: {exc}")) from None
        latency = time.perf_counter() - started
        choices = getattr(response, "choices", None)
        if not choices or getattr(choices[0], "message", None) is None:
            raise LLMError(f"openai backend: {self._where()} returned no choices")
        choice = choices[0]
        text, stopped = cut_at_stop(choice.message.content or "", config.stop)
        usage = response.usage
        calls = [
            ToolCall(id=c.id or f"call_{i}", name=c.function.name, arguments=c.function.arguments or "{}")
            for i, c in enumerate(choice.message.tool_calls or [])
            if getattr(c, "function", None) is not None
        ]
        return Completion(
            text=text,
            prompt_tokens=usage.prompt_tokens if usage else self.count_tokens(sent),
            completion_tokens=usage.completion_tokens if usage else self._counter.count_text(text),
            latency_s=latency,
            finish_reason="stop" if stopped else (choice.finish_reason or "stop"),
            tool_calls=calls,
        )

    def _request(self, messages: list[Message], config: GenerationConfig) -> dict:
        request: dict = {
            "model": self.name,
            "messages": messages,
            self.max_tokens_param: config.max_new_tokens,
            "temperature": config.temperature,
            "top_p": config.top_p,
        }
        stop = [s for s in config.stop if s][:MAX_STOP_STRINGS]
        if stop:
            request["stop"] = stop
        if config.seed is not None:
            request["seed"] = config.seed
        if config.tools:
            request["tools"] = config.tools
            request["tool_choice"] = "auto"
        return request

    def _where(self) -> str:
        """The endpoint as messages show it: its userinfo and secret query values masked."""
        return redact_url(self.base_url) if self.base_url else "OpenAI"

    def _explain(self, exc: openai.OpenAIError) -> str:
        where = self._where()
        retried = f"after {self.max_retries} retries" if self.max_retries else "with retries off"
        if isinstance(exc, openai.APITimeoutError):
            return (
                f"openai backend: no reply from {where} within {self.timeout:g} s ({retried}); "
                "raise timeout= or check that the server is not overloaded"
            )
        if isinstance(exc, openai.APIConnectionError):
            return (
                f"openai backend: cannot connect to {where} ({retried}): {_cause(exc)}; "
                "check that the server is running and base_url is right"
            )
        if not isinstance(exc, openai.APIStatusError):
            return f"openai backend: {type(exc).__name__} at {where}: {exc}"
        status = exc.status_code
        detail = _server_message(exc)
        if status in (400, 413, 422) and _is_context_overflow(exc, detail):
            return (
                f"openai backend: the prompt does not fit the context of model {self.name!r} at {where} "
                f"({status}): {detail} — lower agent.max_prompt_tokens or llm.max_new_tokens"
            )
        if status == 401:
            return f"openai backend: authentication failed (401) at {where} — check the API key in {self._key_source}"
        if status == 403:
            return (
                f"openai backend: permission denied (403) at {where} for model {self.name!r} — "
                f"the key in {self._key_source} lacks access: {detail}"
            )
        if status == 404:
            return (
                f"openai backend: not found (404) at {where}: {detail} — check the model name "
                f"{self.name!r} and that base_url ends in the API root (often /v1)"
            )
        if status == 429:
            return (
                f"openai backend: rate limited (429) at {where} {retried}: {detail} — lower concurrency= or retry later"
            )
        if status >= 500:
            return f"openai backend: server error ({status}) at {where} {retried}: {detail}"
        return f"openai backend: request rejected ({status}) at {where}: {detail}"

    def _scrub(self, text: str) -> str:
        key = self._key.value
        secrets = [key] if key and key != NO_KEY_PLACEHOLDER else []
        return redact_text(text, secrets + url_secrets(self.base_url or "") + environment_secrets())


def _without_priming(messages: list[Message]) -> list[Message]:
    if messages and messages[-1]["role"] == "assistant":
        log.debug("openai backend: dropping a trailing assistant message (priming is local-only)")
        return messages[:-1]
    return messages


def _server_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
        detail = body.get("detail")  # FastAPI servers (transformers serve)
        if detail:
            return detail if isinstance(detail, str) else json.dumps(detail)
    return exc.message


CONTEXT_OVERFLOW_HINTS = ("context_length_exceeded", "maximum context length", "context length", "too many tokens")


def _is_context_overflow(exc: openai.APIStatusError, detail: str) -> bool:
    """Whether the server refused the request because the prompt is longer than the model's context."""
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error", body)
    code = error.get("code") if isinstance(error, dict) else None
    text = f"{code or ''} {detail}".lower()
    return any(hint in text for hint in CONTEXT_OVERFLOW_HINTS)


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return f"{type(cause).__name__}: {cause}" if cause else str(exc)
