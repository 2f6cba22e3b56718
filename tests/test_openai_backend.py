"""The openai backend, run with the real `openai` SDK against our local chat server.

Also covers the OpenAI-compatible test server (`tests/openai_test_server.py`) and tiktoken counting (`agent.llm.tokens`).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request

import httpx
import openai
import pytest
import tiktoken

from crl.agent.llm import tokens
from crl.agent.llm.base import ChatModel, GenerationConfig, LLMError
from crl.agent.llm.openai_backend import OpenAIChatModel
from crl.agent.llm.scripted import ScriptedModel
from crl.agent.llm.served_scoring import ServedEndpointError
from crl.agent.llm.tokens import TiktokenCounter
from tests.openai_test_server import ChatServer, serve_chat_model

SECRET = "sk-test-SECRET-4f9c2a71"


class BlockedNetwork(OSError):
    """Raised by the guard for any connection that would leave this machine."""


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch):
    """Fail every connection or name lookup that is not loopback; lists the attempts.

    Stricter than the suite's guard in conftest.py: name lookups are refused too (tiktoken's
    download tries one first), and the attempts are returned so a test can assert on them.
    """
    attempts: list[str] = []
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def is_local(host) -> bool:
        if host in ("localhost", "", None):
            return True
        try:
            return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
        except ValueError:
            return False

    def check(sock, address) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and not is_local(address[0]):
            attempts.append(str(address[0]))
            raise BlockedNetwork(f"test network guard: connection to {address!r} blocked")

    def connect(sock, address):
        check(sock, address)
        return real_connect(sock, address)

    def connect_ex(sock, address):
        check(sock, address)
        return real_connect_ex(sock, address)

    def getaddrinfo(host, *args, **kwargs):
        if not is_local(host):
            attempts.append(str(host))
            raise socket.gaierror(f"test network guard: lookup of {host!r} blocked")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return attempts


@pytest.fixture(autouse=True)
def offline_tiktoken(monkeypatch, tmp_path):
    """A fresh tiktoken cache that is empty, so counting takes the offline path."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "tiktoken-cache"))
    monkeypatch.setattr(tokens, "_encodings", {})


@pytest.fixture
def serve():
    """Start chat servers on free loopback ports; all are stopped after the test."""
    servers: list[ChatServer] = []

    def start(model: ChatModel, **kwargs) -> tuple[ChatServer, str]:
        server, url = serve_chat_model(model, **kwargs)
        servers.append(server)
        return server, url

    yield start
    for server in servers:
        server.stop()


def echo(messages) -> str:
    return f"reply to {messages[-1]['content']}"


def ask(text: str) -> list[dict]:
    return [{"role": "system", "content": "You play a text game."}, {"role": "user", "content": text}]


def statuses(server: ChatServer) -> list[int]:
    return [status for _, _, status in server.requests]


# --- completions ------------------------------------------------------------------------


def test_batch_of_five_keeps_order_text_and_usage(serve):
    scripted = ScriptedModel(echo, name="scripted-echo")
    server, url = serve(scripted)
    model = OpenAIChatModel("scripted-echo", base_url=url, concurrency=4)
    batch = [ask(f"room {i}") for i in range(5)]
    out = model.generate(batch, GenerationConfig())
    assert [c.text for c in out] == [f"reply to room {i}" for i in range(5)]
    assert all(c.prompt_tokens == scripted.count_tokens(b) for c, b in zip(out, batch))
    assert all(c.completion_tokens == 4 and c.latency_s > 0 for c in out)
    assert statuses(server) == [200] * 5
    assert isinstance(model, ChatModel) and model.name == "scripted-echo"


def test_generation_config_reaches_the_server(serve):
    scripted = ScriptedModel(echo)
    _, url = serve(scripted)
    config = GenerationConfig(max_new_tokens=7, temperature=0.4, top_p=0.9, stop=["\n"], seed=3)
    for param in ("max_tokens", "max_completion_tokens"):
        OpenAIChatModel("m", base_url=url, max_tokens_param=param).generate([ask("x")], config)
    assert [call.config for call in scripted.calls] == [config, config]


def test_concurrent_requests_are_generated_as_one_batch(serve):
    scripted = ScriptedModel(echo)
    _, url = serve(scripted, max_batch=5, batch_window_s=2.0)
    model = OpenAIChatModel("m", base_url=url, concurrency=5)
    started = time.perf_counter()
    out = model.generate([ask(f"q{i}") for i in range(5)], GenerationConfig())
    assert time.perf_counter() - started < 1.5  # a full batch does not wait out the window
    assert [c.text for c in out] == [f"reply to q{i}" for i in range(5)]
    assert [len(call.batch) for call in scripted.calls] == [5]


def test_trailing_assistant_prefix_is_not_sent(serve):
    scripted = ScriptedModel(["go north"])
    _, url = serve(scripted)
    primed = ask("where now?") + [{"role": "assistant", "content": "Action:"}]
    out = OpenAIChatModel("m", base_url=url).generate([primed], GenerationConfig())
    assert out[0].text == "go north"
    assert scripted.calls[0].batch[0] == ask("where now?")


def test_stop_strings_first_four_sent_all_applied_locally(serve):
    scripted = ScriptedModel(["a1 b2 c3 d4 e5 f6"])
    _, url = serve(scripted)
    stop = ["f6", "e5", "d4", "c3", "b2"]
    out = OpenAIChatModel("m", base_url=url).generate([ask("x")], GenerationConfig(stop=stop))
    assert scripted.calls[0].config.stop == stop[:4]
    assert out[0].text == "a1 "
    assert out[0].finish_reason == "stop"


def test_models_endpoint_lists_the_served_model(serve):
    _, url = serve(ScriptedModel(["x"], name="tiny"))
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
    assert [m.id for m in client.models.list()] == ["tiny"]


# --- retries and errors --------------------------------------------------------------------


def test_server_error_is_retried_by_the_sdk(serve):
    server, url = serve(ScriptedModel(echo))
    server.fail_next(status=500, n=1, retry_after_ms=20)
    model = OpenAIChatModel("m", base_url=url, max_retries=2)
    out = model.generate([ask("again")], GenerationConfig())
    assert out[0].text == "reply to again"
    assert statuses(server) == [500, 200]


def test_persistent_server_error_is_a_clear_llm_error(serve):
    server, url = serve(ScriptedModel(echo))
    server.fail_next(status=503, n=3, retry_after_ms=1)
    model = OpenAIChatModel("m", base_url=url, max_retries=2)
    with pytest.raises(LLMError, match=r"server error \(503\) at .* after 2 retries"):
        model.generate([ask("x")], GenerationConfig())
    assert statuses(server) == [503, 503, 503]


def test_wrong_key_fails_once_and_never_shows_the_key(serve, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("CRL_TEST_OPENAI_KEY", SECRET)
    server, url = serve(ScriptedModel(echo), api_key="the-right-key")
    model = OpenAIChatModel("m", base_url=url, api_key_env="CRL_TEST_OPENAI_KEY", max_retries=3)
    with pytest.raises(LLMError) as caught:
        model.generate([ask("x")], GenerationConfig())
    message = str(caught.value)
    assert "authentication failed (401)" in message
    assert url in message and "$CRL_TEST_OPENAI_KEY" in message
    assert statuses(server) == [401]
    shown = [message, repr(caught.value), repr(model), str(model), caplog.text]
    assert not any(SECRET in text for text in shown)
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_key_echoed_by_the_server_is_scrubbed(serve):
    def leaky(messages):
        raise RuntimeError(f"Incorrect API key provided: {SECRET}")

    _, url = serve(ScriptedModel(leaky))
    model = OpenAIChatModel("m", base_url=url, api_key=SECRET, max_retries=0)
    with pytest.raises(LLMError, match=r"server error \(500\).*Incorrect API key provided: \*\*\*"):
        model.generate([ask("x")], GenerationConfig())


def test_right_key_is_accepted(serve, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "the-right-key")
    _, url = serve(ScriptedModel(echo), api_key="the-right-key")
    out = OpenAIChatModel("m", base_url=url).generate([ask("x")], GenerationConfig())
    assert out[0].text == "reply to x"


def test_bad_request_is_not_retried(serve):
    server, url = serve(ScriptedModel(echo))
    server.fail_next(status=400, n=1)
    model = OpenAIChatModel("m", base_url=url, max_retries=3)
    with pytest.raises(LLMError, match=r"request rejected \(400\)"):
        model.generate([ask("x")], GenerationConfig())
    assert statuses(server) == [400]


def test_invalid_settings_are_rejected_by_the_server_with_its_reason(serve):
    server, url = serve(ScriptedModel(echo))
    model = OpenAIChatModel("m", base_url=url, max_retries=3)
    with pytest.raises(LLMError, match=r"request rejected \(400\).*temperature"):
        model.generate([ask("x")], GenerationConfig(temperature=9.0))
    assert statuses(server) == [400]


def test_wrong_path_says_to_check_base_url(serve):
    server, url = serve(ScriptedModel(echo))
    model = OpenAIChatModel("m", base_url=url.removesuffix("/v1"), max_retries=3)
    with pytest.raises(LLMError, match=r"not found \(404\).*base_url"):
        model.generate([ask("x")], GenerationConfig())
    assert statuses(server) == [404]


def test_post_json_reports_the_status_and_keeps_the_connection_usable(serve):
    server, url = serve(ScriptedModel(echo))
    model = OpenAIChatModel("m", base_url=url, max_retries=0)
    with pytest.raises(ServedEndpointError, match=r"not found \(404\)") as raised:
        model.post_json("/systemone", {"model": "m", "state": "x" * 5000})
    assert raised.value.status == 404
    assert model.generate([ask("x")], GenerationConfig())[0].text == "reply to x"
    assert statuses(server) == [404, 200]


def test_a_fastapi_error_detail_reaches_the_message():
    request = httpx.Request("POST", "http://127.0.0.1:1/v1/chat/completions")
    for detail, shown in (("Unexpected fields: {'prompt_logprobs'}", "prompt_logprobs"), ([{"msg": "bad"}], "bad")):
        exc = openai.APIStatusError(
            "Error code: 422", response=httpx.Response(422, request=request), body={"detail": detail}
        )
        model = OpenAIChatModel("m", base_url="http://127.0.0.1:1/v1")
        assert shown in model._explain(exc) and "(422)" in model._explain(exc)


def test_hanging_server_gives_a_clear_timeout(serve):
    server, url = serve(ScriptedModel(echo))
    server.hang_next(seconds=10)
    model = OpenAIChatModel("m", base_url=url, timeout=0.3, max_retries=0)
    started = time.perf_counter()
    with pytest.raises(LLMError, match=r"no reply from .* within 0\.3 s .*raise timeout="):
        model.generate([ask("x")], GenerationConfig())
    assert time.perf_counter() - started < 3


def test_no_server_gives_a_connection_error():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = OpenAIChatModel("m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    with pytest.raises(LLMError, match="cannot connect to .* is running"):
        model.generate([ask("x")], GenerationConfig())


def test_openai_itself_needs_a_key():
    with pytest.raises(LLMError, match=r"no API key .*\$OPENAI_API_KEY"):
        OpenAIChatModel("gpt-4o-mini")


def test_a_local_server_needs_no_key(serve):
    _, url = serve(ScriptedModel(echo))
    assert OpenAIChatModel("m", base_url=url).generate([ask("x")], GenerationConfig())


def test_empty_batch_sends_nothing(serve):
    server, url = serve(ScriptedModel(echo))
    assert OpenAIChatModel("m", base_url=url).generate([], GenerationConfig()) == []
    assert server.requests == []


# --- the server on its own --------------------------------------------------------------------


def post(url: str, body: dict, key: str | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(url, json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_server_answers_in_openai_formats(serve):
    _, url = serve(ScriptedModel(["hello there"], name="tiny"), api_key="k")
    body = {"model": "tiny", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    status, reply = post(f"{url}/chat/completions", body, key="k")
    assert status == 200
    assert reply["object"] == "chat.completion" and reply["model"] == "tiny"
    assert reply["choices"][0]["message"] == {"role": "assistant", "content": "hello there"}
    assert reply["usage"] == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}
    status, error = post(f"{url}/chat/completions", body, key="wrong")
    assert status == 401 and error["error"]["code"] == "invalid_api_key"


def test_server_rejects_fields_it_would_ignore(serve):
    _, url = serve(ScriptedModel(["x"]))
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "logit_bias": {"1": 5}}
    status, error = post(f"{url}/chat/completions", body)
    assert status == 400 and "logit_bias" in error["error"]["message"]
    status, error = post(f"{url}/chat/completions", {**body, "logit_bias": None, "stream": True})
    assert status == 400


def test_model_failure_becomes_a_500(serve):
    server, url = serve(ScriptedModel([]))
    model = OpenAIChatModel("m", base_url=url, max_retries=0)
    with pytest.raises(LLMError, match=r"server error \(500\).*ran out of replies"):
        model.generate([ask("x")], GenerationConfig())


def test_server_binds_loopback_by_default(serve):
    server, _ = serve(ScriptedModel(["x"]))
    assert ipaddress.ip_address(server.server_address[0]).is_loopback


# --- token counting -----------------------------------------------------------------------------


def byte_encoding() -> tiktoken.Encoding:
    """A tiny real tiktoken encoding: one token per byte, no merges."""
    return tiktoken.Encoding(
        name="bytes",
        pat_str=r"[\s\S]",
        mergeable_ranks={bytes([i]): i for i in range(256)},
        special_tokens={},
    )


def test_counts_follow_openai_chat_framing():
    counter = TiktokenCounter("gpt-4o", encoding=byte_encoding())
    messages = [{"role": "system", "content": "abc"}, {"role": "user", "content": "hi"}]
    # 3 per message + role + content, plus 3 that prime the reply
    assert counter.count(messages) == (3 + 6 + 3) + (3 + 4 + 2) + 3
    assert counter.exact


def test_offline_counting_estimates_and_warns_once(caplog, loopback_only):
    caplog.set_level(logging.WARNING, logger="crl.agent.llm.tokens")
    counter = TiktokenCounter("gpt-4o")
    messages = [{"role": "user", "content": "x" * 9}]
    assert counter.count(messages) == 3 + 1 + 3 + 3  # ceil(4/4) + ceil(9/4)
    assert not counter.exact
    TiktokenCounter("gpt-4o-mini").count(messages)
    warnings = [r for r in caplog.records if "TIKTOKEN_CACHE_DIR" in r.getMessage()]
    assert len(warnings) == 1
    assert loopback_only, "tiktoken was expected to try (and be refused) a download"


def test_a_hanging_download_is_abandoned(monkeypatch, caplog):
    release = threading.Event()
    monkeypatch.setattr(tiktoken, "get_encoding", lambda name: release.wait(30))
    started = time.perf_counter()
    try:
        assert tokens.load_encoding("o200k_base", timeout_s=0.2) is None
    finally:
        release.set()
    assert time.perf_counter() - started < 2
    assert "no answer in 0.2 s" in caplog.text


def test_unknown_models_use_the_default_encoding():
    assert tokens.encoding_name_for("smollm2-135m-instruct") == tokens.DEFAULT_ENCODING
    assert tokens.encoding_name_for("gpt-4") == "cl100k_base"


def test_backend_counts_with_tiktoken(serve):
    _, url = serve(ScriptedModel(echo))
    model = OpenAIChatModel("gpt-4o", base_url=url)
    messages = ask("open the door")
    assert model.count_tokens(messages) == TiktokenCounter("gpt-4o").count(messages) > 10


# --- the real embedded model, served -------------------------------------------------------


@pytest.mark.slow
def test_embedded_model_through_the_server(serve, embedded_models_dir):
    local = pytest.importorskip("crl.agent.llm.local")
    embedded = pytest.importorskip("crl.agent.llm.embedded")
    checkpoint = embedded.embedded_model_path(embedded_models_dir)
    chat = local.LocalChatModel(checkpoint, name="smollm2")
    # Both requests in one server batch, as in the direct call, so greedy outputs match.
    _, url = serve(chat, max_batch=2, batch_window_s=5.0)
    model = OpenAIChatModel("smollm2", base_url=url, timeout=120, max_retries=0)
    batch = [
        [{"role": "user", "content": "Say hello."}],
        [{"role": "user", "content": "Name a colour."}],
    ]
    config = GenerationConfig(max_new_tokens=6)
    served = model.generate(batch, config)
    direct = chat.generate(batch, config)
    assert [c.text for c in served] == [c.text for c in direct]
    assert all(c.text.strip() for c in served)
    assert [c.prompt_tokens for c in served] == [chat.count_tokens(b) for b in batch]
    assert all(0 < c.completion_tokens <= 6 for c in served)
