"""Assemble the agent's chat prompt for one step, within a token budget."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from crl.prompts.budget import BudgetItem, TokenCount, allocate, truncate_middle
from crl.prompts.render import render
from crl.prompts.report import PromptReport
from crl.prompts.state import HistoryItem, PromptState
from crl.prompts.untrusted import MEMORY_CLOSE, MEMORY_OPEN

MessageCount = Callable[[list[dict[str, str]]], int]

__all__ = [
    "HistoryItem",
    "MessageCount",
    "PromptBudget",
    "PromptFormat",
    "PromptReport",
    "PromptState",
    "assemble_prompt",
    "build_agent_messages",
    "render_memory",
]


@dataclass(frozen=True)
class PromptFormat:
    """The reply format the prompt asks for.

    Attributes:
        react: ask for `Thought:` then `Action:` (True) or for `Action:` alone.
        reply_prefix: when non-empty, a trailing assistant message that the local backend
            continues, priming the reply format.
        tools: the tool definitions of a tool-using episode (`tool_system.j2`, `tool_step.j2`);
            empty for a game, which picks among actions.
        native: the tools are called through the API (history as assistant and tool turns)
            rather than written as text in the reply.
    """

    react: bool = True
    reply_prefix: str = ""
    tools: tuple[dict, ...] = ()
    native: bool = False


@dataclass(frozen=True)
class PromptBudget:
    """The token budget of a step prompt, counted as the model counts.

    Attributes:
        tokens: the most the whole prompt may take (`agent.max_prompt_tokens`).
        max_observation_tokens: the most the observation may take.
        count_text: tokens of a text on its own.
        count_messages: tokens of a list of chat messages.
    """

    tokens: int
    max_observation_tokens: int
    count_text: TokenCount
    count_messages: MessageCount


def render_memory(items: Sequence[BudgetItem]) -> str:
    """The memory section of the prompt: cases, step hints and rules, in that order, framed as
    data between `untrusted.MEMORY_OPEN` and `MEMORY_CLOSE` (stored text neutralised)."""
    return render(
        "memory.j2",
        open=MEMORY_OPEN,
        close=MEMORY_CLOSE,
        cases=[i for i in items if i.section == "case"],
        hints=[i for i in items if i.section == "hint"],
        rules=[i for i in items if i.section == "rule"],
    )


def build_agent_messages(state: PromptState, fmt: PromptFormat, memory: str = "") -> list[dict[str, str]]:
    """The messages for one agent step, with nothing cut.

    Args:
        state: what the prompt shows (`PromptHistory.state`).
        fmt: the reply format.
        memory: the rendered memory section (`render_memory`), or "".
    """
    if fmt.tools:
        return _tool_messages(state, fmt, memory)
    messages = [
        {"role": "system", "content": render("system.j2", react=fmt.react)},
        {
            "role": "user",
            "content": render(
                "step.j2",
                goal=state.goal,
                memory=memory,
                observation=state.observation,
                admissible=list(state.admissible or []),
                history=list(state.history),
                feedback=state.feedback,
            ),
        },
    ]
    if fmt.reply_prefix:
        messages.append({"role": "assistant", "content": fmt.reply_prefix})
    return messages


def _tool_messages(state: PromptState, fmt: PromptFormat, memory: str) -> list[dict]:
    """The messages of a tool-using step: the tools and call format, the task, the calls so far
    (in the user turn as text, or with native calls as assistant `tool_calls` and `tool` turns)."""
    system = render("tool_system.j2", tools=list(fmt.tools), native=fmt.native, react=fmt.react)
    listed = [] if fmt.native else list(state.history)
    note = None if fmt.native else state.feedback
    user = render("tool_step.j2", goal=state.goal, memory=memory, task=state.observation, history=listed, feedback=note)
    messages: list[dict] = [{"role": "system", "content": system}, {"role": "user", "content": user}]
    if fmt.native:
        for h in state.history:
            if h.call is None:
                messages.append({"role": "assistant", "content": h.action})
                messages.append({"role": "user", "content": h.feedback})
                continue
            function = {"name": h.call["name"], "arguments": h.call["arguments"]}
            messages.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": h.call["id"], "type": "function", "function": function}],
                }
            )
            messages.append(
                {"role": "tool", "tool_call_id": h.call["id"], "name": h.call["name"], "content": h.feedback}
            )
    if fmt.native and state.feedback:
        messages.append({"role": "user", "content": f"Note: {state.feedback}"})
    if fmt.reply_prefix and not fmt.native:
        messages.append({"role": "assistant", "content": fmt.reply_prefix})
    return messages


def assemble_prompt(
    state: PromptState,
    fmt: PromptFormat,
    budget: PromptBudget,
    memory_items: Sequence[BudgetItem] = (),
) -> tuple[list[dict[str, str]], PromptReport]:
    """Build the step prompt so that it never exceeds `budget.tokens`.

    Order of sacrifice: the observation is first capped at `budget.max_observation_tokens`; if
    the prompt without memory is still too long, the oldest history goes, then the observation
    is cut further; memory items then fill what is left, best-ranked first (see
    `prompts.budget.allocate`), and the lowest-ranked are dropped until the whole fits.
    """
    count_text, count_messages, limit = budget.count_text, budget.count_messages, budget.tokens
    history = list(state.history)
    obs = truncate_middle(state.observation, budget.max_observation_tokens, count_text)
    report = PromptReport(tokens=0, budget=limit, observation_truncated=obs != state.observation)

    def build(memory: str = "") -> list[dict[str, str]]:
        shown = PromptState(state.goal, obs, state.admissible, history, state.feedback)
        return build_agent_messages(shown, fmt, memory)

    base = count_messages(build())
    while base > limit and history:
        history.pop(0)
        report.history_dropped += 1
        base = count_messages(build())
    if base > limit:
        obs = truncate_middle(obs, max(count_text(obs) - (base - limit) - 4, 0), count_text)
        report.observation_truncated = True
        base = count_messages(build())
    if base > limit:
        raise ValueError(
            f"the prompt needs {base} tokens without the observation's detail; raise "
            f"agent.max_prompt_tokens (now {limit})"
        )
    items = list(memory_items)
    if not items:
        report.tokens = base
        return build(), report
    alloc = allocate(items, limit - base, count_text)
    kept = alloc.kept
    report.dropped, report.shortened = list(alloc.dropped), list(alloc.shortened)
    messages = build(render_memory(kept))
    total = count_messages(messages)
    while total > limit and kept:
        worst = min(kept, key=lambda it: it.rank)
        kept = [it for it in kept if it is not worst]
        report.dropped.append(worst.key)
        messages = build(render_memory(kept))
        total = count_messages(messages)
    report.memory_keys = [it.key for it in kept]
    report.tokens = total
    return messages, report
