"""Fit text into a token budget: shorten observations, and keep the best-ranked memory items
that fit, shortening or dropping the lowest-ranked first."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

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


def truncate_end(text: str, max_tokens: int, count: TokenCount) -> str:
    """Shorten `text` to at most `max_tokens` by cutting its end (for memory items, whose
    beginning says what they are)."""
    if max_tokens <= 0:
        return ""
    if count(text) <= max_tokens:
        return text
    lo, hi, best = 0, len(text), ""
    while lo <= hi:
        mid = (lo + hi) // 2
        candidate = text[:mid].rstrip() + " ..."
        if count(candidate) <= max_tokens:
            best, lo = candidate, mid + 1
        else:
            hi = mid - 1
    return best


@dataclass(frozen=True)
class BudgetItem:
    """A piece of optional prompt content: `rank` orders what is kept (higher first)."""

    key: str
    section: str
    text: str
    rank: float
    outcome: str = ""


@dataclass
class Allocation:
    """What fitted: the items kept (in their original order), and what was dropped or shortened."""

    kept: list[BudgetItem]
    dropped: list[str] = field(default_factory=list)
    shortened: list[str] = field(default_factory=list)
    tokens: int = 0


MIN_ITEM_TOKENS = 12


def allocate(items: list[BudgetItem], budget: int, count: TokenCount) -> Allocation:
    """Keep items within `budget` tokens (each item counted on its own).

    The lowest-ranked item over budget is first shortened to half (while it stays longer than
    `MIN_ITEM_TOKENS`), then dropped. The result never exceeds the budget.
    Example: three 10-token items in a 25-token budget keep the two best-ranked whole and
    shorten the third to fit.
    """
    sizes = {it.key: count(it.text) for it in items}
    current = {it.key: it for it in items}
    alloc = Allocation(kept=[])
    total = sum(sizes.values())
    while total > max(budget, 0) and current:
        worst = min(current.values(), key=lambda it: it.rank)
        size = sizes[worst.key]
        excess = total - budget
        target = max(size - excess, size // 2)
        if target >= MIN_ITEM_TOKENS and target < size:
            shorter = truncate_end(worst.text, target, count)
            new_size = count(shorter)
            if shorter and new_size < size:
                current[worst.key] = replace(worst, text=shorter)
                sizes[worst.key] = new_size
                total += new_size - size
                if worst.key not in alloc.shortened:
                    alloc.shortened.append(worst.key)
                continue
        del current[worst.key]
        total -= size
        alloc.dropped.append(worst.key)
    alloc.kept = [current[it.key] for it in items if it.key in current]
    alloc.tokens = total
    return alloc
