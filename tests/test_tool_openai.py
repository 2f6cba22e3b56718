"""Native tool calling through the openai backend against the local OpenAI-compatible test
server: tools go out with the request, `tool_calls` come back, the conversation carries the
calls and results, a retried request does not run a tool twice, and SFT rows take TRL's
tool-calling form."""

from __future__ import annotations

import json

import pytest

from crl.agent.app import start_run
from crl.agent.config import load_settings
from crl.agent.llm.base import Completion, ToolCall
from crl.agent.llm.openai_backend import OpenAIChatModel
from crl.agent.llm.scripted import ScriptedModel
from crl.tasks.registry import register
from tests import tool_fixtures
from tests.openai_test_server import serve_chat_model
from tests.tool_fixtures import QA_SPEC


@pytest.fixture(autouse=True)
def qa_task():
    register(QA_SPEC)
    tool_fixtures.CALLS.clear()


def calls(*pairs: tuple[str, str]) -> list[Completion]:
    return [Completion("", tool_calls=[ToolCall(f"call_{i}", name, args)]) for i, (name, args) in enumerate(pairs)]


def settings_for(home):
    return load_settings(
        {
            "home": str(home),
            "agent": {"policy": "llm", "parallel": 1},
            "memory": {"enabled": False},
            "llm": {"max_retries": 2},
        }
    )


def test_native_tool_calls_round_trip_through_the_openai_sdk(tmp_path):
    served = ScriptedModel(
        calls(
            ("calculator", '{"expression": "17*23"}'),
            ("calculator", '{"expression": 17}'),
            ("final_answer", '{"answer": "391"}'),
        )
    )
    server, url = serve_chat_model(served)
    try:
        server.fail_next(500, retry_after_ms=1)  # the first request fails and the SDK retries it
        with OpenAIChatModel("scripted", base_url=url, max_retries=2) as client:
            result = start_run(settings_for(tmp_path / ".crl"), QA_SPEC.name, 1, model=client)
    finally:
        server.stop()
    [episode] = result.episodes
    assert episode.success and result.info.tools["mode"] == "native"
    assert [s.extra.tool.status for s in episode.steps] == ["ok", "invalid", "answer"]
    assert all(s.extra.tool.mode == "native" for s in episode.steps)
    assert tool_fixtures.CALLS == ["17*23"], "the retried request ran the tool once"
    assert [r[2] for r in server.requests] == [500, 200, 200, 200]
    # The tools reached the server as definitions, with no stop strings cutting a reply.
    offered = served.calls[0].config.tools
    assert [t["function"]["name"] for t in offered] == ["calculator", "final_answer"]
    assert offered[0]["function"]["parameters"]["required"] == ["expression"] and not served.calls[0].config.stop
    # The third request carries both calls and their results as assistant and tool turns.
    third = served.calls[2].batch[0]
    assert [m["role"] for m in third] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    assert third[2]["tool_calls"][0]["function"] == {"name": "calculator", "arguments": '{"expression": "17*23"}'}
    assert (third[3]["tool_call_id"], third[3]["content"]) == (third[2]["tool_calls"][0]["id"], "391")
    assert "argument 'expression': 17 is not of type 'string'" in third[5]["content"]
    assert "Tools:" not in third[0]["content"], "native tools are not listed in the prompt's text"


def test_native_sft_rows_use_trls_tool_calling_format(tmp_path):
    from tests.finetune_fixtures import sft_of_successes

    home = tmp_path / ".crl"
    served = ScriptedModel(calls(("calculator", '{"expression": "17*23"}'), ("final_answer", '{"answer": "391"}')))
    server, url = serve_chat_model(served)
    try:
        with OpenAIChatModel("scripted", base_url=url) as client:
            result = start_run(settings_for(home), QA_SPEC.name, 1, model=client)
    finally:
        server.stop()
    built = sft_of_successes(home)
    first, second = built.rows
    assert first["completion"] == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "17*23"}}}
            ],
        }
    ]
    assert json.loads(first["tools"]) == result.info.tools["definitions"]
    assert [m["role"] for m in second["prompt"]] == ["system", "user", "assistant", "tool"]
    assert second["prompt"][2]["tool_calls"][0]["function"]["arguments"] == {"expression": "17*23"}
    assert second["prompt"][3] == {"role": "tool", "tool_call_id": "call_0", "name": "calculator", "content": "391"}
    assert second["completion"][0]["tool_calls"][0]["function"] == {
        "name": "final_answer",
        "arguments": {"answer": "391"},
    }
