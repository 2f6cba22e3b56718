"""Tool choice by scoring, arguments by generation (`agent.tool_choice`): the tool names are
scored, the reply is primed with the chosen tool's opening, and the decision is logged."""

from __future__ import annotations

import random

import pytest

from crl.agent.app import start_run
from crl.agent.config import load_settings
from crl.agent.llm.scripted import ScriptedModel
from crl.agent.posterior import MemoryAdvantage, PosteriorConfig, PosteriorPolicy
from crl.agent.tool_choice import by_tool_name, call_opening, choose_tool, primed, tool_name_of
from crl.memory.records import StepRecord
from crl.tasks.registry import register
from tests import tool_fixtures
from tests.tool_fixtures import QA_SPEC


@pytest.fixture(autouse=True)
def qa_task():
    register(QA_SPEC)
    tool_fixtures.CALLS.clear()


def test_the_opening_opens_the_first_required_argument():
    string = {"properties": {"expression": {"type": "string"}}, "required": ["expression"]}
    number = {"properties": {"n": {"type": "integer"}, "label": {"type": "string"}}, "required": ["n"]}
    assert call_opening("calculator", string) == ' calculator {"expression": "'
    assert call_opening("count", number) == ' count {"n": '
    assert call_opening("ping", {"properties": {}}) == " ping {}"
    assert tool_name_of('calculator {"expression": "2+3"}') == "calculator"
    assert tool_name_of("final_answer{}") == "final_answer" and tool_name_of("  ") == ""


def test_priming_extends_the_reply_prefix_or_adds_one():
    chat = [{"role": "user", "content": "Goal: x"}, {"role": "assistant", "content": "Action:"}]
    assert primed(chat, ' calc {"e": "')[-1]["content"] == 'Action: calc {"e": "'
    assert chat[-1]["content"] == "Action:", "the prompt it was given is not changed"
    assert primed(chat[:1], " calc {}")[-1] == {"role": "assistant", "content": "Action: calc {}"}


def test_memory_reads_stored_calls_by_tool_name():
    step = StepRecord.model_construct(id="st:e1:0", task="qa", action='calculator {"expression": "2+3"}')
    [(renamed, sim)] = by_tool_name([(step, 0.9)])
    assert renamed.action == "calculator" and sim == 0.9 and step.action.startswith("calculator {")


def test_the_model_chooses_alone_and_memory_can_overrule_it():
    probs = {"calculator": 0.3, "final_answer": 0.7}
    alone = choose_tool(probs, {}, None, random.Random(0))
    assert (alone.decided_by, alone.model_action) == ("llm", "final_answer")
    evidence = {
        "calculator": MemoryAdvantage("calculator", q=1.0, baseline=0.2, support=8.0, n=8),
        "final_answer": MemoryAdvantage("final_answer", q=0.0, baseline=0.2, support=8.0, n=8),
    }
    policy = PosteriorPolicy(PosteriorConfig())
    with_memory = choose_tool(probs, evidence, policy, random.Random(0))
    assert with_memory.decided_by == "memory" and with_memory.posterior["chosen"] == "calculator"
    assert with_memory.posterior["memory_changed_argmax"] is True
    assert choose_tool(probs, {}, policy, random.Random(0)).posterior["chosen"] == "final_answer"


def test_a_scored_run_primes_the_call_and_logs_why_the_tool_was_chosen(tmp_path):
    # Each step: one scripted reply scores the tool names, the next continues the primed call.
    model = ScriptedModel(["calculator", '17*23"}', "final_answer", '391"}'])
    settings = load_settings(
        {
            "home": str(tmp_path / ".crl"),
            "agent": {"reply_format": "action", "policy": "llm", "parallel": 1, "tool_choice": "score"},
            "memory": {"enabled": False},
        }
    )
    [episode] = start_run(settings, QA_SPEC.name, 1, model=model).episodes
    assert [s.action for s in episode.steps] == ['calculator {"expression": "17*23"}', 'final_answer {"answer": "391"}']
    assert episode.success and tool_fixtures.CALLS == ["17*23"]
    generated = [c for c in model.calls if c.config.max_new_tokens]
    assert [c.batch[0][-1]["content"] for c in generated] == [
        'Action: calculator {"expression": "',
        'Action: final_answer {"answer": "',
    ]
    policies = [s.extra.policy for s in episode.steps]
    assert [p.decided_by for p in policies] == ["llm", "llm"]
    assert [p.model_action for p in policies] == ["calculator", "final_answer"]
    assert policies[0].reason.startswith("tool scored 0.99 of calculator 0.99, final_answer 0.01")


def test_generate_leaves_the_whole_call_to_the_model(tmp_path):
    model = ScriptedModel([' calculator {"expression": "17*23"}', ' final_answer {"answer": "391"}'])
    settings = load_settings(
        {
            "home": str(tmp_path / ".crl"),
            "agent": {"reply_format": "action", "policy": "llm", "parallel": 1, "tool_choice": "generate"},
            "memory": {"enabled": False},
        }
    )
    [episode] = start_run(settings, QA_SPEC.name, 1, model=model).episodes
    assert episode.success and all(s.extra.policy is None for s in episode.steps)
    assert all(c.batch[0][-1]["content"] == "Action:" for c in model.calls)
