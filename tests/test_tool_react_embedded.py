"""The ReAct tool format with the real embedded model (SmolLM2-135M through the local backend)."""

from __future__ import annotations

import pytest

from crl.agent.app import start_run
from crl.agent.config import load_settings
from crl.agent.llm.embedded import embedded_model_path
from crl.agent.llm.local import LocalChatModel
from crl.tasks.registry import register
from tests.tool_fixtures import QA_SPEC


@pytest.mark.slow
def test_embedded_model_calls_tools_in_react_text(crl_home, embedded_models_dir):
    register(QA_SPEC)
    model = LocalChatModel(embedded_model_path(embedded_models_dir))
    settings = load_settings(
        {
            "home": str(crl_home),
            "agent": {"parallel": 1, "max_steps": 3, "policy": "llm"},
            "llm": {"max_new_tokens": 32},
            "memory": {"enabled": False},
        }
    )
    try:
        result = start_run(settings, QA_SPEC.name, 1, model=model)
    finally:
        model.close()
    assert result.info.tools["mode"] == "react"  # the local backend has no native tool calls
    [episode] = result.episodes
    assert episode.finished and 1 <= len(episode.steps) <= 3
    for step in episode.steps:
        record = step.extra.tool
        assert step.raw_output.startswith("Action:") and step.completion_tokens > 0
        assert record is not None and record.mode == "react"
        if record.status in ("ok", "answer"):
            assert step.valid and step.action.startswith(record.name + " {")
        else:
            assert record.result, "an unusable call is answered with its reason"
    system = step.extra.prompt.messages[0]["content"]
    assert "- calculator: Evaluate an arithmetic expression." in system
