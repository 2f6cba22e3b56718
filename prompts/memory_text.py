"""The text of memory items in the prompt: past cases, step hints and action values (rendered
from `templates/case.j2`, `hint.j2` and `action_value.j2`). The memory section that holds
them is `templates/memory.j2`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from crl.prompts.render import render

MAX_CASE_ACTIONS = 8


@dataclass(frozen=True)
class CaseView:
    """What a past episode shows in the prompt.

    Attributes:
        goal: the episode's goal.
        actions: its valid actions, in order.
        success: whether it succeeded.
        steps: how many steps it took.
        ended: why it ended (shown for failures: the end reason, or the status).
        reached: sub-goals it reached (shown for failures).
    """

    goal: str
    actions: Sequence[str]
    success: bool
    steps: int
    ended: str = ""
    reached: Sequence[str] = field(default_factory=tuple)


def case_actions(actions: Sequence[str]) -> list[str]:
    """The actions a case shows: repeats in a row merged, a long middle replaced by "...".

    Example: `case_actions(["go east", "go east", "take key"])` is `["go east", "take key"]`.
    """
    merged: list[str] = []
    for action in actions:
        if action and (not merged or merged[-1] != action):
            merged.append(action)
    if len(merged) > MAX_CASE_ACTIONS:
        half = MAX_CASE_ACTIONS // 2
        merged = merged[:half] + ["..."] + merged[-half:]
    return merged


def render_case(case: CaseView) -> str:
    """A compact case: the goal, the key actions taken, and how it ended.

    Example: "Goal: Find the brass key and take it. Did: go east > take brass key.
    Result: success in 2 steps."
    """
    return render(
        "case.j2",
        goal=case.goal,
        actions=case_actions(case.actions),
        success=case.success,
        steps=case.steps,
        ended=case.ended,
        reached=list(case.reached),
    )


def render_hint(observation: str, action: str, success: bool) -> str:
    """What was done in a similar stored state and how that episode ended."""
    return render("hint.j2", observation=observation, action=action, success=success)


def render_action_value(
    action: str,
    successes: int,
    n: int,
    invalid: int = 0,
    repeated: int = 0,
    unverified: int = 0,
    similar: int = 0,
) -> str:
    """One line for memory's value of an action, e.g. "take key → success 4 of 5 (1 invalid)"; with
    votes the environment did not verify left out of the counts, "drop key → success 0 of 0 (+48
    unverified)"; with votes that came from similar actions only, "put pen in sofa → similar actions:
    success 0 of 2", or "take key → success 4 of 5 (2 by similar actions)" when some did."""
    return render(
        "action_value.j2",
        action=action,
        successes=successes,
        n=n,
        invalid=invalid,
        repeated=repeated,
        unverified=unverified,
        similar=similar,
        only_similar=n > 0 and similar >= n,
    )
