"""Tools from a real MCP server, started by the test over stdio (tests/mcp_server.py, FastMCP)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp")

from crl.agent.app import start_run  # noqa: E402
from crl.agent.config import load_settings  # noqa: E402
from crl.agent.llm.scripted import ScriptedModel  # noqa: E402
from crl.agent.tools.tool import ToolError  # noqa: E402
from crl.agent.tools.toolbox import open_toolbox  # noqa: E402
from crl.tasks.base import TaskSpec  # noqa: E402
from crl.tasks.registry import register  # noqa: E402
from tests.tool_fixtures import QuestionEnv  # noqa: E402

SERVER = f"{sys.executable} {Path(__file__).with_name('mcp_server.py')}"


def test_mcp_tools_join_the_toolbox_with_their_schemas():
    box = open_toolbox(mcp=[SERVER], timeout_s=20)
    try:
        assert box.names() == ["add", "fail", "final_answer"]
        add = box.tools[0]
        assert add.parameters["required"] == ["a", "b"] and add.parameters["properties"]["a"]["type"] == "integer"
        assert add.description.startswith("Add two integers.") and add.source == f"mcp:{SERVER}"
        assert box.executor.call("add", {"a": 2, "b": 3}, "k1").text == "5"
        failed = box.executor.call("fail", {"reason": "no"}, "k2")
        assert failed.status == "error" and "refused: no" in failed.text
        assert box.executor.call("add", {"a": "two", "b": 3}, "k3").status == "invalid"  # checked before the call
    finally:
        box.close()


def test_an_episode_calls_an_mcp_tool(tmp_path):
    register(TaskSpec("qamcp/add", lambda: QuestionEnv("What is 2 + 3?", "5"), "Addition over MCP.", max_steps=3))
    model = ScriptedModel([' add {"a": 2, "b": 3}', ' final_answer {"answer": "5"}'])
    settings = load_settings(
        {
            "home": str(tmp_path / ".crl"),
            "agent": {"policy": "llm", "reply_format": "action", "parallel": 1, "mcp": [SERVER]},
            "memory": {"enabled": False},
        }
    )
    result = start_run(settings, "qamcp/add", 1, model=model)
    [episode] = result.episodes
    assert episode.success
    assert [(s.action, s.extra.tool.result) for s in episode.steps][0] == ('add {"a": 2, "b": 3}', "5")
    assert result.info.tools["sources"]["add"] == f"mcp:{SERVER}"


def test_a_server_that_cannot_start_says_so():
    with pytest.raises(ToolError, match="did not start.*run the command yourself"):
        open_toolbox(mcp=[f"{sys.executable} -c 'raise SystemExit(3)'"])
