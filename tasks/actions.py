"""The one canonical form of an action's text, shared by parsing, memory and the engines."""

from __future__ import annotations

import re

ARTICLES = frozenset({"the", "a", "an"})


def normalise_action(text: str) -> str:
    """Lower-case, drop punctuation and articles, collapse spaces.

    Example:
        >>> normalise_action("Take the Brass KEY.")
        'take brass key'
    """
    words = re.sub(r"[^\w\s-]", " ", text.lower()).split()
    return " ".join(w for w in words if w not in ARTICLES)
