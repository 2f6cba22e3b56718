"""Fit text into a token budget."""

from __future__ import annotations

from typing import Callable

TokenCount = Callable[[str], int]

ELLIPSIS = " [...] "


def truncate_middle(text: str, max_tokens: int, count: TokenCount) -> str:
    """Shorten `text` to at most `max_tokens` by cutting its middle, keeping head and tail.

    Observations put the situation first and the latest feedback last, so both ends matter.
    Example: with a whitespace counter, `truncate_middle("a b c d e f", 4, ...)` keeps
    the first and last words around the marker.
    """
    if max_tokens <= 0:
        return ""
    if count(text) <= max_tokens:
        return text
    lo, hi = 0, len(text) // 2
    best = ""
    while lo <= hi:
        keep = (lo + hi) // 2
        candidate = text[:keep].rstrip() + ELLIPSIS + text[len(text) - keep :].lstrip()
        if count(candidate) <= max_tokens:
            best, lo = candidate, keep + 1
        else:
            hi = keep - 1
    return best
