"""Tool-using episodes in the agent loop (ReAct text calls, scripted model): every call logged as
a step, bad calls and failing tools answered as observations, final_answer checked by the task,
resumed runs not calling a tool again, recall credited like retrieval, SFT rows."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from crl.agent.app import resume_run, start_run
from crl.agent.config import load_settings
from crl.agent.llm.base import LLMError
from crl.agent.llm.scripted import ScriptedModel
from crl.agent.tool_setup import TOOL_JOURNAL
from crl.tasks.registry import register
from tests import tool_fixtures
from tests.tool_fixtures import QA_SPEC

TASK = QA_SPEC.name


@pytest.fixture(autouse=True)
def qa_task():
    register(QA_SPEC)
    tool_fixtures.CALLS.clear()


def settings_for(home, memory: bool = False, **agent):
    agent = {"reply_format": "action", "policy": "llm", "parallel": 1} | agent
    return load_settings({"home": str(home), "agent": agent, "memory": {"enabled": memory}})


def _user(call) -> str:
    return call.batch[0][1]["content"]


def test_every_call_is_a_step_and_bad_calls_come_back_as_observations(tmp_path):
    model = ScriptedModel(
        [
            ' calculator {"expression": "17*23"}',
            ' calculator {"expression": 17}',
            ' explode {"reason": "testing"}',
            ' search {"q": "17*23"}',
            ' final_answer {"answer": "391"}',
        ]
    )
    settings = settings_for(tmp_path / ".crl", tools=["tests.tool_fixtures:explode"])
    result = start_run(settings, TASK, 1, model=model)
    [episode] = result.episodes
    steps = episode.steps
    assert [s.action for s in steps] == [
        'calculator {"expression": "17*23"}',
        'calculator {"expression": 17}',
        'explode {"reason": "testing"}',
        "",
        'final_answer {"answer": "391"}',
    ]
    assert [s.extra.tool.status for s in steps] == ["ok", "invalid", "error", "unknown", "answer"]
    assert [s.valid for s in steps] == [True, False, True, False, True]
    assert [s.reward for s in steps] == [0, 0, 0, 0, 1.0]
    assert steps[0].extra.tool.result == "391" and tool_fixtures.CALLS == ["17*23"]
    assert steps[1].observation == "391"  # a tool's result is the next observation
    assert steps[-1].info["verdict"] == {"expected": "391", "given": "391"}
    assert episode.success and episode.status == "done"
    # What the model read after each call: the result, or the reason the call failed.
    prompts = [_user(c) for c in model.calls]
    assert '> calculator {"expression": "17*23"}\nResult: 391' in prompts[1]
    assert "calculator was not called: argument 'expression': 17 is not of type 'string'" in prompts[2]
    assert "explode failed: RuntimeError: exploded: testing" in prompts[3]
    assert "there is no tool 'search'; the tools are: calculator, explode, final_answer" in prompts[4]
    system = model.calls[0].batch[0][0]["content"]
    assert "- calculator: Evaluate an arithmetic expression." in system and "Action: calculator {...}" in system
    assert all(s.extra.prompt.messages for s in steps), "tool prompts are logged whole (replay cannot rebuild them)"
    assert result.info.tools["mode"] == "react"
    assert [d["function"]["name"] for d in result.info.tools["definitions"]] == [
        "calculator",
        "explode",
        "final_answer",
    ]


def test_out_of_budget_is_a_failure(tmp_path):
    model = ScriptedModel(lambda messages: ' calculator {"expression": "1+1"}')
    result = start_run(settings_for(tmp_path / ".crl", max_steps=3), TASK, 1, model=model)
    [episode] = result.episodes
    assert (episode.status, episode.success, len(episode.steps)) == ("truncated", False, 3)
    assert episode.end_reason == "max_steps (3)"


def test_a_resumed_run_does_not_call_a_tool_again(tmp_path):
    home = tmp_path / ".crl"
    settings = settings_for(home)
    first = ScriptedModel([' calculator {"expression": "17*23"}'])
    with pytest.raises(LLMError, match="ran out of replies"):
        start_run(settings, TASK, 1, model=first)  # killed mid-episode, after one call
    assert tool_fixtures.CALLS == ["17*23"]
    [run_dir] = list((home / "runs").iterdir())
    journal = [json.loads(line) for line in (run_dir / TOOL_JOURNAL).read_text().splitlines()]
    assert [(e["key"].split("#", 1)[1], e["text"]) for e in journal] == [
        ('0#calculator {"expression": "17*23"}', "391")
    ]
    second = ScriptedModel([' final_answer {"answer": "391"}'])
    result = resume_run(settings, run_dir.name, model=second)
    assert tool_fixtures.CALLS == ["17*23"], "the logged call was replayed, not run again"
    [episode] = result.episodes
    assert episode.success and [s.extra.tool.status for s in episode.steps] == ["ok", "answer"]
    assert '> calculator {"expression": "17*23"}\nResult: 391' in _user(second.calls[0])


def test_react_sft_rows_teach_the_calls_of_successful_episodes(tmp_path):
    from tests.finetune_fixtures import sft_of_successes

    home = tmp_path / ".crl"
    model = ScriptedModel(
        [' calculator {"expression": "17*23"}', ' explode {"reason": "x"}', ' final_answer {"answer": "391"}']
    )
    start_run(settings_for(home, tools=["tests.tool_fixtures:explode"]), TASK, 1, model=model)
    built = sft_of_successes(home)
    assert [r["completion"][0]["content"] for r in built.rows] == [
        'Action: calculator {"expression": "17*23"}',
        'Action: final_answer {"answer": "391"}',
    ]
    assert built.dropped["tool-failed"] == 1  # a tool that raised is nothing to imitate
    sent = [m for m in model.calls[2].batch[0] if m["role"] != "assistant"]
    assert built.rows[1]["prompt"] == sent  # exactly what the model saw
    assert "tools" not in built.rows[0]  # the tools are in the prompt's text


def test_recall_searches_experience_and_is_credited(tmp_path, monkeypatch):
    from crl.agent import advisor as advisor_module
    from crl.agent import app
    from tests.finetune_fixtures import open_bank

    monkeypatch.setattr(app, "open_bank", lambda settings, actor=None: open_bank(settings.home))
    credited: list[list[str]] = []
    real_credit = advisor_module.credit_episode

    def credit(bank, success, family, ids, **kw):
        credited.append(list(ids))
        return real_credit(bank, success, family, ids, **kw)

    monkeypatch.setattr(advisor_module, "credit_episode", credit)
    home = tmp_path / ".crl"
    settings = load_settings(
        {
            "home": str(home),
            "agent": {"reply_format": "action", "policy": "llm", "parallel": 1, "memory": "cases"},
            "reflect": {"enabled": False},
        }
    )
    solved = ScriptedModel([' calculator {"expression": "17*23"}', ' final_answer {"answer": "391"}'])
    start_run(settings, TASK, 1, model=solved)
    recalling = ScriptedModel([' recall {"query": "What is 17 * 23?", "k": 1}', ' final_answer {"answer": "391"}'])
    result = start_run(settings, TASK, 1, model=recalling, seed_start=1)
    [episode] = result.episodes
    recall_step = episode.steps[0]
    assert recall_step.extra.tool.status == "ok"
    assert "calculator" in recall_step.extra.tool.result and "success" in recall_step.extra.tool.result.lower()
    assert "recall" in [d["function"]["name"] for d in result.info.tools["definitions"]]
    recalled = recall_step.extra.tool.memory_ids
    assert recalled and all(i.startswith("ep:") for i in recalled)
    assert set(recalled) <= set(credited[-1]), "what recall showed is credited with the episode's outcome"
    assert Counter(s.extra.tool.status for s in episode.steps) == {"ok": 1, "answer": 1}
