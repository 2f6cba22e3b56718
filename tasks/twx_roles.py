"""Action roles for TextWorldExpress's twc: what a take or a put does, in words that hold in every world.

twc's worlds draw their objects from fold-specific sets (no train object appears in dev or test),
but many differ only in colour or pattern: a "dirty brown T-shirt" here, a "dirty white T-shirt"
there, and both go in the laundry basket. Without a role, episodic control matches a stored
action to an admissible one by exact text, else by verb and last word at `ec_partial_weight`: every
"put ... in laundry basket" votes for every other, whatever is put, and a stored success of putting a
shirt in the basket argues for putting the wastepaper there too. With this role a take or put votes
only for the same object, colour aside, and the same place (`TaskSpec.action_role`).
"""

from __future__ import annotations

COLOURS = frozenset(
    "black blue brown checkered gray grey green hawaiian magenta orange pink plaid purple red striped teal white "
    "yellow".split()
)


def _object(words: list[str]) -> str:
    return " ".join(w for w in words if w.lower() not in COLOURS)


def twc_action_role(observation: str, action: str) -> str | None:
    """The role of a twc take or put: the object without its colour or pattern, and the place;
    None for every other action (opening a container, looking around: their text holds across worlds).

    Example:
        >>> twc_action_role("", "put dirty brown T-shirt in laundry basket")
        'put dirty T-shirt in laundry basket'
        >>> twc_action_role("", "take dirty white T-shirt"), twc_action_role("", "open wardrobe")
        ('take dirty T-shirt', None)
    """
    words = action.split()
    if len(words) >= 2 and words[0].lower() == "take":
        return f"take {_object(words[1:])}"
    if len(words) >= 4 and words[0].lower() == "put" and ("in" in words[2:] or "on" in words[2:]):
        at = max(i for i, w in enumerate(words) if w in ("in", "on"))
        return f"put {_object(words[1:at])} {words[at]} {' '.join(words[at + 1 :])}"
    return None
