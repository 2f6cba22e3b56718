"""A test double: any `ChatModel` served over a small OpenAI-compatible HTTP API.

Endpoints: `POST /v1/chat/completions` (non-streaming) and `GET /v1/models`. Requests
that arrive together with the same decoding settings are generated as one batch, so a
client sending concurrent requests (the `openai` backend does) gets batched generation.
Tool calling is served as OpenAI does it: a request's `tools` reach the model in
`GenerationConfig.tools`, conversations may hold assistant `tool_calls` and `tool` turns, and a
reply whose `Completion.tool_calls` is set (a `ScriptedModel` scripted with
`Completion("", tool_calls=[...])`) comes back as `tool_calls` with finish reason "tool_calls".
Two scoring extensions can be switched on, as real servers offer them:
`systemone=True` answers `POST /v1/systemone` (transformers serve's `choice` questions)
with the served model's `score_actions`, and `prompt_logprobs=` (a `PromptLogprobs`, such as
`word_prompt_logprobs` or `local_prompt_logprobs`) answers chat completions that ask for
`prompt_logprobs` with `continue_final_message` as vLLM does. A server without them rejects
those fields (400) or, with `unknown_fields="ignore"`, ignores them as some servers do.
The tests use it to drive the `openai` backend, its retries and its error messages
against a real HTTP server (fault injection included) without a real model server. It
binds to loopback by default, and `api_key=` adds a bearer-token check. To serve a model
for real, use vLLM, llama.cpp's `llama-server` or `transformers serve` (see the README).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import queue
import re
import socket
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from crl.agent.llm.base import ChatModel, Completion, GenerationConfig, Message

log = logging.getLogger(__name__)

API_PREFIX = "/v1"
MAX_BODY_BYTES = 16 * 1024 * 1024
SYSTEMONE_MAX_OPTIONS = 26  # transformers' DecisionPipeline labels options A to Z
PROMPT_LOGPROB_FIELDS = ("prompt_logprobs", "continue_final_message", "add_generation_prompt")


class PromptLogprobs(Protocol):
    """Per prompt token of the conversation (its final message continued, not closed):
    None for the first token, then `(token_id, decoded_text, logprob)`."""

    def __call__(self, messages: list[Message]) -> list[tuple[int, str, float] | None]: ...


class _TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str


class _FunctionCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    arguments: str


class _ToolCall(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    type: Literal["function"] = "function"
    function: _FunctionCall


class _ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[_TextPart] | None = None
    name: str | None = None
    tool_calls: list[_ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _answers_a_call(self) -> "_ChatMessage":
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id of the call it answers")
        return self

    def to_message(self) -> Message:
        content = self.content
        if isinstance(content, list):
            content = "".join(part.text for part in content)
        message: Message = {"role": self.role, "content": content or ""}
        if self.tool_calls:
            message["tool_calls"] = [c.model_dump() for c in self.tool_calls]
        if self.role == "tool":
            message["tool_call_id"] = self.tool_call_id or ""
            if self.name:
                message["name"] = self.name
        return message


class _FunctionDef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class _ToolDef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["function"]
    function: _FunctionDef


class ChatCompletionRequest(BaseModel):
    """The body of `POST /v1/chat/completions` this server understands.

    Unknown fields are rejected so a client never silently loses a setting; the few
    accepted-but-ignored fields are listed explicitly.
    """

    model_config = ConfigDict(extra="forbid")
    model: str
    messages: list[_ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: Literal[1] = 1
    stream: Literal[False] = False
    user: str | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    tools: list[_ToolDef] | None = None
    tool_choice: Literal["auto", "none", "required"] | None = None
    prompt_logprobs: int | None = Field(default=None, ge=0)
    continue_final_message: bool | None = None
    add_generation_prompt: bool | None = None

    def extension_fields(self) -> list[str]:
        """The vLLM extension fields this request sets."""
        return [name for name in PROMPT_LOGPROB_FIELDS if getattr(self, name) is not None]

    def to_config(self) -> GenerationConfig:
        """The decoding settings as a `GenerationConfig`."""
        max_new = self.max_completion_tokens or self.max_tokens or GenerationConfig().max_new_tokens
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        tools = [t.model_dump(exclude_none=True) for t in self.tools] if self.tools else None
        return GenerationConfig(
            max_new_tokens=max_new,
            temperature=self.temperature,
            top_p=self.top_p,
            stop=stop,
            seed=self.seed,
            tools=None if self.tool_choice == "none" else tools,
        )


class _ChoiceQuestion(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["choice"]
    criteria: dict[str, str | None] = Field(min_length=1)
    instructions: str | None = None


class SystemOneRequest(BaseModel):
    """The body of `POST /v1/systemone` this server understands: `choice` questions only."""

    model_config = ConfigDict(extra="forbid")
    model: str
    state: str
    questions: dict[str, _ChoiceQuestion] = Field(min_length=1, max_length=64)


@dataclass
class _Fault:
    status: int
    retry_after_ms: int | None
    hang_s: float
    retry_after_s: int | None = None
    message: str | None = None
    code: str | None = None
    cut: bool = False


@dataclass
class _Job:
    messages: list[Message]
    config: GenerationConfig
    result: Future


class ChatServer(ThreadingHTTPServer):
    """The HTTP server returned by `serve_chat_model`; call `stop()` when done.

    Attributes:
        model: the model being served.
        requests: `(method, path, status)` of every request answered, in order.
    """

    daemon_threads = True
    block_on_close = False

    def __init__(
        self,
        model: ChatModel,
        address: tuple[str, int],
        api_key: str | None,
        max_batch: int,
        batch_window_s: float,
        systemone: bool = False,
        prompt_logprobs: PromptLogprobs | None = None,
        unknown_fields: Literal["reject", "ignore"] = "reject",
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)
        self.model = model
        self.requests: list[tuple[str, str, int]] = []
        self._api_key = api_key
        self._faults: list[_Fault] = []
        self._lock = threading.Lock()
        self._released = threading.Event()
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._max_batch = max_batch
        self._batch_window_s = batch_window_s
        self._workers: list[threading.Thread] = []
        self.systemone = systemone
        self.prompt_logprobs = prompt_logprobs
        self.unknown_fields = unknown_fields
        self._model_lock = threading.Lock()

    @property
    def url(self) -> str:
        """The base URL clients use, ending in `/v1`."""
        host, port = self.server_address[:2]
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}{API_PREFIX}"

    def fail_next(
        self,
        status: int = 500,
        n: int = 1,
        retry_after_ms: int | None = None,
        retry_after_s: int | None = None,
        message: str | None = None,
        code: str | None = None,
    ) -> None:
        """Answer the next `n` requests with HTTP `status` and an OpenAI-style error.

        Args:
            status: the HTTP status to return.
            n: how many requests fail.
            retry_after_ms: sent as the `retry-after-ms` header, which the `openai` SDK
                honours as its backoff; lets tests of retries run in milliseconds.
            retry_after_s: sent as the standard `Retry-After` header (whole seconds).
            message: the error's message (default: "injected failure (HTTP <status>)").
            code: the error's `code` field, e.g. "context_length_exceeded".
        """
        with self._lock:
            self._faults.extend(_Fault(status, retry_after_ms, 0.0, retry_after_s, message, code) for _ in range(n))

    def cut_next(self, n: int = 1) -> None:
        """Answer the next `n` requests with a 200 whose body stops halfway (the connection closes)."""
        with self._lock:
            self._faults.extend(_Fault(200, None, 0.0, cut=True) for _ in range(n))

    def hang_next(self, seconds: float, n: int = 1) -> None:
        """Hold the next `n` requests for `seconds` (or until `stop()`) before answering."""
        with self._lock:
            self._faults.extend(_Fault(0, None, seconds) for _ in range(n))

    def start(self) -> None:
        """Serve in background daemon threads."""
        # A short poll interval keeps stop() fast; serve_forever only sees shutdown between polls.
        serve = lambda: self.serve_forever(poll_interval=0.05)  # noqa: E731
        for target, name in ((serve, "chat-http"), (self._batch_loop, "chat-batch")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._workers.append(thread)

    def stop(self) -> None:
        """Stop serving, release hanging requests and close the socket."""
        self._released.set()
        self._jobs.put(None)
        self.shutdown()
        self.server_close()
        for thread in self._workers:
            thread.join(timeout=5)
        while not self._jobs.empty():
            job = self._jobs.get_nowait()
            if job is not None:
                job.result.set_exception(RuntimeError("the server stopped before generating"))

    def __enter__(self) -> ChatServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _record(self, method: str, path: str, status: int) -> None:
        with self._lock:
            self.requests.append((method, path, status))

    def _take_fault(self) -> _Fault | None:
        with self._lock:
            return self._faults.pop(0) if self._faults else None

    def _authorized(self, header: str | None) -> bool:
        if self._api_key is None:
            return True
        expected = f"Bearer {self._api_key}".encode()
        return hmac.compare_digest((header or "").encode(), expected)

    def _generate(self, messages: list[Message], config: GenerationConfig) -> Completion:
        job = _Job(messages, config, Future())
        self._jobs.put(job)
        return job.result.result()

    def _choice(self, state: str, options: list[str]) -> list[float]:
        """The served model's probabilities of `options` as answers about `state`."""
        with self._model_lock:
            [dist] = self.model.score_actions([[{"role": "user", "content": state}]], [options])
        return dist.probs

    def _prompt_logprobs(self, messages: list[Message]) -> list[dict[str, dict[str, Any]] | None]:
        """vLLM's `prompt_logprobs` with `prompt_logprobs=0`: the prompt token's own entry only."""
        with self._model_lock:
            tokens = self.prompt_logprobs(messages)
        return [None if t is None else {str(t[0]): {"logprob": t[2], "rank": 1, "decoded_token": t[1]}} for t in tokens]

    def _batch_loop(self) -> None:
        # One thread owns the model: local models are not safe to call from many threads,
        # and grouping concurrent requests into one batch is what makes them fast.
        while True:
            first = self._jobs.get()
            if first is None:
                return
            batch = [first]
            deadline = time.monotonic() + self._batch_window_s
            leftover: list[_Job | None] = []
            while len(batch) < self._max_batch:
                try:
                    job = self._jobs.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if job is not None and job.config == first.config:
                    batch.append(job)
                else:
                    leftover.append(job)
                    break
            self._run_batch(batch)
            for job in leftover:
                self._jobs.put(job)

    def _run_batch(self, batch: list[_Job]) -> None:
        try:
            completions = self.model.generate([job.messages for job in batch], batch[0].config)
            if len(completions) != len(batch):
                raise RuntimeError(f"model returned {len(completions)} replies for a batch of {len(batch)}")
        except Exception as exc:
            for job in batch:
                job.result.set_exception(exc)
            return
        for job, completion in zip(batch, completions):
            job.result.set_result(completion)


class _Handler(BaseHTTPRequestHandler):
    server: ChatServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s - %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        if not self._admit():
            return
        if self.path.rstrip("/") == f"{API_PREFIX}/models":
            self._send_json(200, {"object": "list", "data": [self._model_card()]})
        else:
            self._send_error(404, f"no route GET {self.path}; try GET {API_PREFIX}/models")

    def do_POST(self) -> None:
        if not self._admit():
            return
        path = self.path.rstrip("/")
        if path == f"{API_PREFIX}/systemone" and self.server.systemone:
            self._systemone()
            return
        if path != f"{API_PREFIX}/chat/completions":
            self._discard_body()  # left unread, it would be parsed as the next request on this connection
            self._send_error(404, f"no route POST {self.path}; try POST {API_PREFIX}/chat/completions")
            return
        try:
            body = json.loads(self._read_body() or b"null")
            request = ChatCompletionRequest.model_validate(body)
        except ValidationError as exc:
            self._send_error(400, f"invalid chat completion request: {_describe(exc)}")
            return
        except ValueError as exc:
            self._send_error(400, f"invalid chat completion request: {exc}")
            return
        messages = [m.to_message() for m in request.messages]
        extensions = request.extension_fields()
        if extensions and self.server.prompt_logprobs is not None:
            self._send_prompt_logprobs(request, messages)
            return
        if extensions and self.server.unknown_fields == "reject":
            self._send_error(
                400, f"invalid chat completion request: {', '.join(extensions)}: extra inputs are not permitted"
            )
            return
        try:
            completion = self.server._generate(messages, request.to_config())
        except Exception as exc:
            log.exception("model failed to generate")
            self._send_error(500, f"the model failed: {type(exc).__name__}: {exc}", "server_error")
            return
        self._send_json(200, self._completion_body(completion))

    def _systemone(self) -> None:
        try:
            request = SystemOneRequest.model_validate(json.loads(self._read_body() or b"null"))
        except ValidationError as exc:
            self._send_error(422, f"invalid systemone request: {_describe(exc)}")
            return
        except ValueError as exc:
            self._send_error(422, f"invalid systemone request: {exc}")
            return
        answers = {}
        for name, question in request.questions.items():
            options = list(question.criteria)
            if len(options) > SYSTEMONE_MAX_OPTIONS:
                self._send_error(
                    422,
                    f"question {name!r}: this model reads at most {SYSTEMONE_MAX_OPTIONS} options, got {len(options)}",
                )
                return
            try:
                probs = self.server._choice(request.state, options)
            except Exception as exc:
                log.exception("model failed to score")
                self._send_error(500, f"the model failed: {type(exc).__name__}: {exc}", "server_error")
                return
            by_option = dict(zip(options, probs))
            best = max(by_option, key=by_option.get)
            answers[name] = {"type": "choice", "choice": best, "probabilities": by_option}
        tokens = len(request.state.split())
        self._send_json(
            200, {"model": request.model, "answers": answers, "usage": {"input_tokens": tokens, "output_tokens": 0}}
        )

    def _send_prompt_logprobs(self, request: ChatCompletionRequest, messages: list[Message]) -> None:
        if not request.continue_final_message or request.add_generation_prompt or messages[-1]["role"] != "assistant":
            self._send_error(
                400,
                "prompt_logprobs is served for a continued final assistant message only "
                "(continue_final_message=true, add_generation_prompt=false)",
            )
            return
        try:
            entries = self.server._prompt_logprobs(messages)
        except Exception as exc:
            log.exception("model failed to score the prompt")
            self._send_error(500, f"the model failed: {type(exc).__name__}: {exc}", "server_error")
            return
        body = self._completion_body(Completion(text="", prompt_tokens=len(entries), finish_reason="length"))
        self._send_json(200, body | {"prompt_logprobs": entries})

    def _admit(self) -> bool:
        """Apply auth and injected faults; False when the request was already answered."""
        if not self.server._authorized(self.headers.get("Authorization")):
            self._discard_body()
            self._send_error(
                401,
                "missing or incorrect API key; send it as 'Authorization: Bearer <key>'",
                "invalid_request_error",
                code="invalid_api_key",
            )
            return False
        fault = self.server._take_fault()
        if fault is None:
            return True
        if fault.hang_s:
            self.server._released.wait(fault.hang_s)
            return True
        self._discard_body()
        if fault.cut:
            self._send_cut()
            return False
        headers = {}
        if fault.retry_after_ms is not None:
            headers["retry-after-ms"] = str(fault.retry_after_ms)
        if fault.retry_after_s is not None:
            headers["Retry-After"] = str(fault.retry_after_s)
        message = fault.message or f"injected failure (HTTP {fault.status})"
        self._send_error(fault.status, message, code=fault.code, headers=headers)
        return False

    def _send_cut(self) -> None:
        data = json.dumps(self._completion_body(Completion(text="Action: look"))).encode()
        self.server._record(self.command, self.path, 200)
        self.close_connection = True
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self.close_connection = True  # the unread body would corrupt the next request
            raise ValueError(f"request body of {length} bytes exceeds {MAX_BODY_BYTES}")
        return self.rfile.read(length) if length else b""

    def _discard_body(self) -> None:
        try:
            self._read_body()
        except ValueError:
            pass

    def _model_card(self) -> dict[str, Any]:
        return {
            "id": self.server.model.name,
            "object": "model",
            "created": 0,
            "owned_by": "complementary-rl",
        }

    def _completion_body(self, completion: Completion) -> dict[str, Any]:
        finish = completion.finish_reason if completion.finish_reason == "length" else "stop"
        message: dict[str, Any] = {"role": "assistant", "content": completion.text}
        if completion.tool_calls:
            message["content"] = completion.text or None
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in completion.tool_calls
            ]
            finish = "tool_calls"
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.server.model.name,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": finish,
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": completion.prompt_tokens,
                "completion_tokens": completion.completion_tokens,
                "total_tokens": completion.prompt_tokens + completion.completion_tokens,
            },
        }

    def _send_error(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        if status >= 500 and kind == "invalid_request_error":
            kind = "server_error"
        body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
        self._send_json(status, body, headers)

    def _send_json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        # Recorded before replying, so a client that has its answer sees it counted.
        self.server._record(self.command, self.path, status)
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            log.debug("client went away before the reply to %s", self.path)


def serve_chat_model(
    model: ChatModel,
    host: str = "127.0.0.1",
    port: int = 0,
    api_key: str | None = None,
    max_batch: int = 8,
    batch_window_s: float = 0.01,
    systemone: bool = False,
    prompt_logprobs: PromptLogprobs | None = None,
    unknown_fields: Literal["reject", "ignore"] = "reject",
) -> tuple[ChatServer, str]:
    """Start serving `model` over an OpenAI-compatible API in background threads.

    Args:
        model: the chat model to serve.
        host: interface to bind; loopback by default. Binding elsewhere without
            `api_key` exposes the model to the network.
        port: TCP port; 0 picks a free one.
        api_key: when set, requests must send `Authorization: Bearer <api_key>`.
        max_batch: most requests generated together.
        batch_window_s: how long the first request of a batch waits for company.
        systemone: answer `POST /v1/systemone` choice questions with `model.score_actions`.
        prompt_logprobs: answer vLLM-style `prompt_logprobs` requests with these log-probs.
        unknown_fields: what a server without `prompt_logprobs` does with its fields:
            "reject" (400) or "ignore" (generate as usual).

    Returns:
        The running server (call `server.stop()`) and its base URL, ending in `/v1`.

    Example:
        >>> server, url = serve_chat_model(ScriptedModel(["hi"]))
        >>> OpenAIChatModel("scripted", base_url=url).generate(
        ...     [[{"role": "user", "content": "hello"}]], GenerationConfig())[0].text
        'hi'
        >>> server.stop()
    """
    if api_key is None and not _is_loopback(host):
        log.warning(
            "serving %s on %s without an API key: anyone who can reach this port can use "
            "it; pass api_key= to require one",
            model.name,
            host,
        )
    server = ChatServer(
        model, (host, port), api_key, max_batch, batch_window_s, systemone, prompt_logprobs, unknown_fields
    )
    server.start()
    return server, server.url


def word_prompt_logprobs(table: dict[str, float], default: float = -5.0) -> PromptLogprobs:
    """A fake model's prompt log-probs: a word (with its leading space) is one token whose
    log-prob is `table[word]`, or `default`.

    The conversation renders as `<|role|>\ncontent\n` per message, the final one left open.

    Example:
        with `{"take": -1.0, "key": -3.0}`, the prompt ending `Action: take key` ends with the
        tokens `" take"` (-1.0) and `" key"` (-3.0).
    """

    def logprobs(messages: list[Message]) -> list[tuple[int, str, float] | None]:
        text = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages[:-1])
        text += f"<|{messages[-1]['role']}|>\n{messages[-1]['content']}"
        words = re.findall(r"\s*\S+", text)
        return [None] + [(i + 1, w, table.get(w.strip(), default)) for i, w in enumerate(words[1:])]

    return logprobs


def local_prompt_logprobs(chat) -> PromptLogprobs:
    """A `LocalChatModel`'s prompt log-probs, as vLLM computes them: the conversation rendered
    with its final message continued (`chat.render`), one forward pass, the log-prob of each
    token after the ones before it."""

    def logprobs(messages: list[Message]) -> list[tuple[int, str, float] | None]:
        import torch

        tokenizer = chat._tokenizer()
        ids = chat._encode(chat.render(messages))
        with torch.inference_mode():
            logits = chat.model(input_ids=torch.tensor([ids], device=chat.device)).logits[0].float()
        lp = logits.log_softmax(-1)
        return [None] + [(ids[t], tokenizer.decode([ids[t]]), float(lp[t - 1, ids[t]])) for t in range(1, len(ids))]

    return logprobs


def _describe(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(part) for part in error['loc']) or 'body'}: {error['msg']}" for error in exc.errors()
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
