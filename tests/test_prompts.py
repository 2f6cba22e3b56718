"""Prompt templates and the token-budget allocator."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jinja2 import UndefinedError

from crl.prompts.agent_prompt import (
    HistoryItem,
    PromptBudget,
    PromptFormat,
    PromptState,
    assemble_prompt,
    build_agent_messages,
)
from crl.prompts.budget import BudgetItem, allocate, truncate_end, truncate_middle
from crl.prompts.render import render


def words(text: str) -> int:
    return len(text.split())


def count_messages(messages) -> int:
    return sum(words(m["content"]) + 3 for m in messages)


def budget(tokens: int, max_observation_tokens: int = 100) -> PromptBudget:
    return PromptBudget(tokens, max_observation_tokens, words, count_messages)


def test_missing_template_variable_fails_loudly():
    with pytest.raises(UndefinedError):
        render("step.j2", goal="g")


def test_step_prompt_snapshot():
    state = PromptState(
        "Take the key.",
        "You are in the hall.",
        ["go north", "take key"],
        [HistoryItem("look", "You are in the hall.")],
        "bad reply",
    )
    msgs = build_agent_messages(state, PromptFormat(react=False, reply_prefix="Action:"))
    assert msgs[1]["content"] == (
        "Goal: Take the key.\n\nYour last steps:\n> look\nYou are in the hall.\n\n"
        "Now: You are in the hall.\n\nValid actions:\n- go north\n- take key\n\nNote: bad reply"
    )
    assert msgs[-1] == {"role": "assistant", "content": "Action:"}
    assert "one line: 'Action:'" in msgs[0]["content"]


def test_memory_section_says_adapt_not_copy():
    items = [
        BudgetItem("e1", "case", "goal: take key; steps: go east > take key", 2.0, "success"),
        BudgetItem("s1", "hint", "take key -> success 4 of 5", 1.0),
        BudgetItem("r1", "rule", "Keys are never in the treasure room.", 1.0),
    ]
    msgs, report = assemble_prompt(PromptState("g", "obs"), PromptFormat(), budget(500), items)
    text = msgs[1]["content"]
    assert "[success] goal: take key" in text and "do not copy blindly" in text
    assert "take key -> success 4 of 5" in text and "Keys are never" in text
    assert report.memory_keys == ["e1", "s1", "r1"] and not report.dropped


def test_truncations_respect_limits():
    text = " ".join(f"w{i}" for i in range(100))
    assert words(truncate_middle(text, 10, words)) <= 10
    assert truncate_middle(text, 10, words).startswith("w0") and truncate_middle(text, 10, words).endswith("w99")
    assert words(truncate_end(text, 10, words)) <= 10


def test_lowest_ranked_items_go_first():
    items = [BudgetItem(f"i{r}", "case", " ".join(["x"] * 10), float(r)) for r in range(4)]
    alloc = allocate(items, 25, words)
    assert "i3" in [i.key for i in alloc.kept] and "i2" in [i.key for i in alloc.kept]
    assert alloc.dropped[0] == "i0"
    assert alloc.tokens <= 25


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.text(min_size=1, max_size=300), st.floats(-5, 5)), max_size=8),
    st.integers(120, 400),
    st.text(max_size=2000),
    st.lists(st.text(max_size=100), max_size=6),
)
def test_assembled_prompt_never_exceeds_budget(raw_items, limit, observation, history_texts):
    items = [BudgetItem(f"k{i}", ("case", "hint", "rule")[i % 3], t, r) for i, (t, r) in enumerate(raw_items)]
    history = [HistoryItem("act", h) for h in history_texts]
    msgs, report = assemble_prompt(
        PromptState("Reach the goal.", observation, ["go north", "look"], history),
        PromptFormat(react=True, reply_prefix="Thought:"),
        budget(limit, 200),
        items,
    )
    assert count_messages(msgs) <= limit
    assert report.tokens == count_messages(msgs)
    assert set(report.memory_keys) | set(report.dropped) == {i.key for i in items}
    assert not set(report.memory_keys) & set(report.dropped)


def test_budget_too_small_for_the_frame_is_a_clear_error():
    with pytest.raises(ValueError, match="max_prompt_tokens"):
        assemble_prompt(PromptState("g", "o"), PromptFormat(), budget(10))
