"""The notes the model reads after a step it could not use, or an action it repeated
(rendered from `templates/feedback.j2`)."""

from __future__ import annotations

from crl.prompts.render import render


def repeat_note(action: str) -> str:
    """The note after `action` was taken again in the same situation.

    Example: `repeat_note("look")` is "You already did 'look' in this same situation; try something else."
    """
    return render("feedback.j2", kind="repeat", action=action)


def no_action_note() -> str:
    """The note after a reply in which no action could be found."""
    return render("feedback.j2", kind="no_action")


def invalid_action_note(raw_action: str) -> str:
    """The note after a reply whose action (`raw_action`, shown cut to 80 characters) is not
    one of the valid actions."""
    return render("feedback.j2", kind="invalid_action", action=raw_action)


def unreadable_note(error: object) -> str:
    """The note after a reply the parser failed on (`error`: what went wrong)."""
    return render("feedback.j2", kind="unreadable", error=error)
