"""LLM backend faults, through the real `openai` SDK against a local HTTP server that injects them
(`tests/openai_test_server.py`): each is retried by the SDK, or becomes a failed step with its
reason in a run that goes on; none crashes a run, none is labelled a success."""

from __future__ import annotations

import json
import time

import pytest

from crl.agent.app import start_run
from crl.agent.config import load_settings
from crl.agent.llm.base import BackendRefused, BatchError, Completion, GenerationConfig, LLMError
from crl.agent.llm.openai_backend import OpenAIChatModel
from crl.agent.llm.scripted import ScriptedModel
from crl.agent.runs import RunStore
from tests.openai_test_server import serve_chat_model

TASK = "keyroom/key"
ASK = [{"role": "user", "content": "hello"}]


@pytest.fixture
def served():
    """Start a scripted model behind the test server; stops every server at the end."""
    servers = []

    def start(reply="Action: look"):
        script = reply if callable(reply) else (lambda messages: reply)
        server, url = serve_chat_model(ScriptedModel(script))
        servers.append(server)
        return server, url

    yield start
    for server in servers:
        server.stop()


def settings_for(home, **agent):
    agent.setdefault("policy", "llm")
    agent.setdefault("parallel", 2)
    agent.setdefault("max_steps", 3)
    return load_settings({"home": str(home), "agent": agent, "memory": {"enabled": False}})


def test_429_with_retry_after_is_waited_out_and_retried(served):
    server, url = served()
    server.fail_next(429, retry_after_s=1)
    model = OpenAIChatModel("m", base_url=url, max_retries=2)
    started = time.monotonic()
    [reply] = model.generate([ASK], GenerationConfig())
    assert reply.text == "Action: look"
    assert time.monotonic() - started >= 0.9  # the server's Retry-After, not the SDK's 0.5 s
    assert [status for _, _, status in server.requests] == [429, 200]


def test_a_timeout_is_retried_and_then_answered(served):
    server, url = served()
    server.hang_next(3.0)
    model = OpenAIChatModel("m", base_url=url, timeout=0.4, max_retries=1)
    [reply] = model.generate([ASK], GenerationConfig())
    assert reply.text == "Action: look"


def test_a_reply_cut_off_mid_body_is_retried(served):
    server, url = served()
    server.cut_next()
    [reply] = OpenAIChatModel("m", base_url=url, max_retries=1).generate([ASK], GenerationConfig())
    assert reply.text == "Action: look"


def test_context_overflow_says_the_prompt_is_too_long_and_is_not_retried(served):
    server, url = served()
    server.fail_next(
        400,
        message="This model's maximum context length is 16 tokens. However, you requested 900 tokens.",
        code="context_length_exceeded",
    )
    model = OpenAIChatModel("m", base_url=url, max_retries=3)
    with pytest.raises(LLMError, match="does not fit the context.*max_prompt_tokens"):
        model.generate([ASK], GenerationConfig())
    assert len(server.requests) == 1


def test_one_failed_request_of_a_batch_keeps_the_others(served):
    server, url = served()
    server.fail_next(500)
    model = OpenAIChatModel("m", base_url=url, max_retries=0, concurrency=2)
    with pytest.raises(BatchError) as caught:
        model.generate([ASK, ASK], GenerationConfig())
    results, errors = caught.value.results, caught.value.errors
    assert sorted(r is None for r in results) == [False, True]
    assert [e is None for e in errors] == [r is not None for r in results]
    assert "server error (500)" in next(e for e in errors if e)


def test_server_errors_become_failed_steps_with_the_reason_and_the_run_goes_on(crl_home, served):
    server, url = served()
    server.fail_next(500, n=2)  # both prompts of the first batch, with retries off
    model = OpenAIChatModel("m", base_url=url, max_retries=0)
    result = start_run(settings_for(crl_home), TASK, 2, model=model)
    report = result.report()
    logged = RunStore(crl_home / "runs").episodes(result.info.run_id)
    failed = [e for e in logged if e.status == "error"]
    assert len(failed) == 2 and all(not e.success for e in failed)
    for e in failed:
        assert e.end_reason.startswith("model error:") and "server error (500)" in e.end_reason
        step = e.steps[-1]
        assert not step.valid and step.info["error"].startswith("model error:") and step.action == ""
    retried = [e for e in logged if e.episode_id.endswith("-retry")]
    assert len(retried) == 2 and all(e.finished and e.status != "error" for e in retried)
    assert report["errored"] == 2 and report["episodes"] == 2
    assert any("server error (500)" in why for why in report["error_reasons"])
    assert result.info.status == "finished"


def test_empty_and_truncated_replies_are_failed_steps_never_successes(crl_home, served):
    replies = iter([Completion(""), Completion("Action: ta", finish_reason="length")] * 10)
    server, url = served(lambda messages: next(replies))
    model = OpenAIChatModel("m", base_url=url, max_retries=0)
    result = start_run(settings_for(crl_home, parallel=1, max_steps=2), TASK, 1, model=model)
    [episode] = result.episodes
    assert not episode.success and episode.status == "truncated"
    empty, cut = episode.steps
    assert not empty.valid and empty.extra.feedback and empty.raw_output == ""
    assert not cut.valid and cut.action == "" and "cut off at the token limit" in cut.extra.feedback


def test_a_model_that_keeps_failing_stops_the_run_as_failed_with_the_reason(crl_home, served):
    server, url = served()
    server.fail_next(503, n=1000)
    model = OpenAIChatModel("m", base_url=url, max_retries=0)
    with pytest.raises(LLMError, match="calls in a row.*--resume"):
        start_run(settings_for(crl_home), TASK, 4, model=model)
    [info] = RunStore(crl_home / "runs").list()
    assert info.status == "failed" and "server error (503)" in info.error
    episodes = RunStore(crl_home / "runs").episodes(info.run_id)
    assert episodes and not any(e.success for e in episodes)


def test_posterior_scoring_failures_are_failed_steps_too(crl_home, served):
    server, url = served()
    server.fail_next(500, n=2)
    model = OpenAIChatModel("m", base_url=url, max_retries=0)
    settings = settings_for(crl_home, policy="posterior", parallel=1, max_steps=2)
    result = start_run(settings, TASK, 1, model=model)
    logged = RunStore(crl_home / "runs").episodes(result.info.run_id)
    first = logged[0]
    assert first.status == "error" and "model error" in first.end_reason and not first.success
    assert result.info.status == "finished"
    assert json.loads((crl_home / "runs" / result.info.run_id / "run.json").read_text())["status"] == "finished"


def test_a_refused_key_stops_the_run_at_once_as_failed(crl_home):
    server, url = serve_chat_model(ScriptedModel(lambda messages: "Action: look"), api_key="the-right-key")
    try:
        model = OpenAIChatModel("m", base_url=url, api_key="a-wrong-key", max_retries=3)
        with pytest.raises(BackendRefused, match="authentication failed"):
            start_run(settings_for(crl_home, parallel=2), TASK, 4, model=model)
        statuses = [status for _, _, status in server.requests]
        assert 1 <= len(statuses) <= 2 and set(statuses) == {401}  # at most one per prompt: a 401 is not retried
    finally:
        server.stop()
    [info] = RunStore(crl_home / "runs").list()
    assert info.status == "failed" and "authentication failed (401)" in info.error and "a-wrong-key" not in info.error


def test_served_scoring_keeps_the_states_whose_requests_succeeded(served):
    from crl.agent.llm.served_scoring import ServedScoringOptions

    server, url = served()
    options = ServedScoringOptions(methods=("sampling",), samples=2)
    model = OpenAIChatModel("m", base_url=url, max_retries=0, concurrency=1, scoring=options)
    actions = ["look", "go west"]
    [probed] = model.score_actions([ASK], [actions])  # the first call probes the method
    assert probed.best == "look"
    server.fail_next(500)
    with pytest.raises(BatchError) as caught:
        model.score_actions([ASK, ASK], [actions, actions])
    results, errors = caught.value.results, caught.value.errors
    assert results[0] is None and "server error (500)" in errors[0]
    assert results[1] is not None and results[1].best == "look" and errors[1] is None
