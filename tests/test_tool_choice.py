"""Tool choice by scoring, arguments by generation (`agent.tool_choice`): the tool names are
scored, the reply is primed with the chosen tool's opening, and the decision is logged."""

from __future__ import annotations

import random

import pytest

from crl.agent.app import start_run
from crl.agent.config import load_settings
from crl.agent.llm.scripted import ScriptedModel
from crl.agent.posterior import MemoryAdvantage, PosteriorConfig, PosteriorPolicy
from crl.agent.tool_choice import by_tool_name, call_opening, choose_tool, close_string, primed, tool_name_of
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


@pytest.mark.parametrize(
    ("rest", "closed"),
    [
        ('17*23"}', '17*23"}'),
        ("12 * 83}", '12 * 83"}'),
        ("12 * 83", '12 * 83"}'),
        ('say \\"hi\\"', 'say \\"hi\\""}'),
    ],
)
def test_an_argument_left_open_is_closed(rest, closed):
    assert close_string(rest) == closed


def test_an_only_argument_ends_the_call_at_its_closing_quote():
    assert close_string('108.00", "type": "number"}', only=True) == '108.00"}'
    assert close_string('108.00", "type": "number"}') == '108.00", "type": "number"}'
    assert close_string("12 * 83}", only=True) == '12 * 83"}'


def test_a_tool_already_called_in_this_situation_is_passed_over():
    probs = {"calculator": 0.7, "final_answer": 0.3}
    tool, again = choose_tool(probs, {}, None, random.Random(0), avoid={"calculator"})
    assert (tool, again.decided_by, again.model_action) == ("final_answer", "repeat-avoidance", "calculator")
    assert "already called here: calculator" in again.reason
    assert choose_tool(probs, {}, None, random.Random(0), avoid=set(probs))[1].decided_by == "llm"
    tool, posterior = choose_tool(probs, {}, PosteriorPolicy(PosteriorConfig()), random.Random(0), avoid={"calculator"})
    assert tool == posterior.posterior["chosen"] == "final_answer"


def test_the_reply_keeps_its_first_line_after_the_opening():
    from crl.agent.llm.base import Completion
    from crl.agent.tool_choice import ToolPrime
    from crl.memory.trajectory import PolicyDecision

    prime = ToolPrime("calculator", ' calculator {"expression": "', [], PolicyDecision("llm"))
    done = prime.completed(Completion(text="12 * 83}\nCall final_answer only when", completion_tokens=9))
    assert done.text == ' calculator {"expression": "12 * 83"}' and done.completion_tokens == 9


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
    _, alone = choose_tool(probs, {}, None, random.Random(0))
    assert (alone.decided_by, alone.model_action) == ("llm", "final_answer")
    evidence = {
        "calculator": MemoryAdvantage("calculator", q=1.0, baseline=0.2, support=8.0, n=8),
        "final_answer": MemoryAdvantage("final_answer", q=0.0, baseline=0.2, support=8.0, n=8),
    }
    policy = PosteriorPolicy(PosteriorConfig())
    _, with_memory = choose_tool(probs, evidence, policy, random.Random(0))
    assert with_memory.decided_by == "memory" and with_memory.posterior["chosen"] == "calculator"
    assert with_memory.posterior["memory_changed_argmax"] is True
    assert choose_tool(probs, {}, policy, random.Random(0))[0] == "final_answer"


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


def test_a_repeated_call_hands_the_next_step_to_another_tool(tmp_path):
    # The model always prefers the calculator; once it has called it again where it stands,
    # the next step goes to final_answer.
    model = ScriptedModel(["calculator", '17*23"}', "calculator", '17*23"}', "calculator", '391"}'])
    settings = load_settings(
        {
            "home": str(tmp_path / ".crl"),
            "agent": {"reply_format": "action", "policy": "llm", "parallel": 1, "tool_choice": "score"},
            "memory": {"enabled": False},
        }
    )
    [episode] = start_run(settings, QA_SPEC.name, 1, model=model).episodes
    assert [s.action for s in episode.steps] == [
        'calculator {"expression": "17*23"}',
        'calculator {"expression": "17*23"}',
        'final_answer {"answer": "391"}',
    ]
    assert [s.decided_by for s in episode.steps] == ["llm", "llm", "repeat-avoidance"]
    assert episode.success


def test_a_backend_that_refuses_the_tool_scoring_stops_the_run(tmp_path):
    from crl.agent.llm.base import BackendRefused

    class Refusing(ScriptedModel):
        def score_actions(self, batch, candidates, temperature=1.0):
            raise BackendRefused("401: the key was refused")

    settings = load_settings(
        {
            "home": str(tmp_path / ".crl"),
            "agent": {"reply_format": "action", "policy": "llm", "parallel": 1, "tool_choice": "score"},
            "memory": {"enabled": False},
        }
    )
    model = Refusing(['17*23"}'])
    with pytest.raises(BackendRefused, match="the key was refused"):
        start_run(settings, QA_SPEC.name, 1, model=model)
    assert tool_fixtures.CALLS == [] and not [c for c in model.calls if c.config.max_new_tokens]
