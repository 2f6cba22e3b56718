"""Assemble the agent's chat prompt for one step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from prompts.render import render


@dataclass
class HistoryItem:
    """A past step as the prompt shows it: the action and the feedback it got."""

    action: str
    feedback: str


def build_agent_messages(
    goal: str,
    observation: str,
    admissible: Sequence[str] | None,
    history: Sequence[HistoryItem] = (),
    feedback: str | None = None,
    react: bool = True,
    reply_prefix: str = "",
) -> list[dict[str, str]]:
    """The messages for one agent step.

    Args:
        react: ask for `Thought:` then `Action:` (True) or for `Action:` alone.
        reply_prefix: when non-empty, a trailing assistant message that the local backend
            continues, priming the reply format.
    """
    messages = [
        {"role": "system", "content": render("system.j2", react=react)},
        {
            "role": "user",
            "content": render(
                "step.j2",
                goal=goal,
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
