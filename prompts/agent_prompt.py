"""Assemble the agent's chat prompt for one step, within a token budget."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from prompts.budget import BudgetItem, TokenCount, allocate, truncate_middle
from prompts.render import render

MessageCount = Callable[[list[dict[str, str]]], int]


@dataclass
class HistoryItem:
    """A past step as the prompt shows it: the action and the feedback it got."""

    action: str
    feedback: str


@dataclass
class PromptReport:
    """How a prompt was fitted: its size, and what was cut to make it fit."""

    tokens: int
    budget: int
    memory_keys: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    shortened: list[str] = field(default_factory=list)
    observation_truncated: bool = False
    history_dropped: int = 0
    messages: list[dict[str, str]] | None = None

    def to_dict(self) -> dict:
        """The report as logged with the step (`messages` only when the agent chose to log them)."""
        out = self.__dict__.copy()
        if out["messages"] is None:
            del out["messages"]
        return out


def render_memory(items: Sequence[BudgetItem]) -> str:
    """The memory section of the prompt: cases, step hints and rules, in that order."""
    return render(
        "memory.j2",
        cases=[i for i in items if i.section == "case"],
        hints=[i for i in items if i.section == "hint"],
        rules=[i for i in items if i.section == "rule"],
    )


def build_agent_messages(
    goal: str,
    observation: str,
    admissible: Sequence[str] | None,
    history: Sequence[HistoryItem] = (),
    feedback: str | None = None,
    react: bool = True,
    reply_prefix: str = "",
    memory: str = "",
) -> list[dict[str, str]]:
    """The messages for one agent step.

    Args:
        react: ask for `Thought:` then `Action:` (True) or for `Action:` alone.
        reply_prefix: when non-empty, a trailing assistant message that the local backend
            continues, priming the reply format.
        memory: the rendered memory section (`render_memory`), or "".
    """
    messages = [
        {"role": "system", "content": render("system.j2", react=react)},
        {
            "role": "user",
            "content": render(
                "step.j2",
                goal=goal,
                memory=memory,
                observation=observation,
                admissible=list(admissible or []),
                history=list(history),
                feedback=feedback,
            ),
        },
    ]
    if reply_prefix:
        messages.append({"role": "assistant", "content": reply_prefix})
    return messages


def assemble_prompt(
    goal: str,
    observation: str,
    admissible: Sequence[str] | None,
    history: Sequence[HistoryItem],
    feedback: str | None,
    react: bool,
    reply_prefix: str,
    memory_items: Sequence[BudgetItem],
    budget: int,
    max_observation_tokens: int,
    count_text: TokenCount,
    count_messages: MessageCount,
) -> tuple[list[dict[str, str]], PromptReport]:
    """Build the step prompt so that it never exceeds `budget` tokens.

    Order of sacrifice: the observation is first capped at `max_observation_tokens`; if the
    prompt without memory is still too long, the oldest history goes, then the observation
    is cut further; memory items then fill what is left, best-ranked first (see
    `prompts.budget.allocate`), and the lowest-ranked are dropped until the whole fits.
    """
    history = list(history)
    obs = truncate_middle(observation, max_observation_tokens, count_text)
    report = PromptReport(tokens=0, budget=budget, observation_truncated=obs != observation)

    def build(memory: str = "") -> list[dict[str, str]]:
        return build_agent_messages(goal, obs, admissible, history, feedback, react, reply_prefix, memory)

    base = count_messages(build())
    while base > budget and history:
        history.pop(0)
        report.history_dropped += 1
        base = count_messages(build())
    if base > budget:
        obs = truncate_middle(obs, max(count_text(obs) - (base - budget) - 4, 0), count_text)
        report.observation_truncated = True
        base = count_messages(build())
    if base > budget:
        raise ValueError(
            f"the prompt needs {base} tokens without the observation's detail; raise "
            f"agent.max_prompt_tokens (now {budget})"
        )
    items = list(memory_items)
    if not items:
        report.tokens = base
        return build(), report
    alloc = allocate(items, budget - base, count_text)
    kept = alloc.kept
    report.dropped, report.shortened = list(alloc.dropped), list(alloc.shortened)
    messages = build(render_memory(kept))
    total = count_messages(messages)
    while total > budget and kept:
        worst = min(kept, key=lambda it: it.rank)
        kept = [it for it in kept if it is not worst]
        report.dropped.append(worst.key)
        messages = build(render_memory(kept))
        total = count_messages(messages)
    report.memory_keys = [it.key for it in kept]
    report.tokens = total
    return messages, report
