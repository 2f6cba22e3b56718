"""Turn a model's reply into a thought and one action, mapped onto an admissible action.

Replies from small models are messy: markdown, quotes, a missing thought, extra prose, the
action repeated. `parse_reply` never raises; a reply it cannot use comes back with
`action=None` and an `error` the agent shows the model as feedback.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from difflib import SequenceMatcher

from crl.prompts.feedback import invalid_action_note, no_action_note, unreadable_note
from crl.tasks.actions import normalise_action

_ACTION_RE = re.compile(r"(?:^|[\s*_#>`\"'(\[])action\s*[*_]*\s*[:：=-]\s*[*_]*", re.IGNORECASE)
_THOUGHT_RE = re.compile(r"(?:^|[\s*_#>`\"'(\[])thought\s*[*_]*\s*[:：=-]\s*[*_]*", re.IGNORECASE)
_VERB_SIMILARITY = 0.75
_STRIP_CHARS = " \t\r\n`'\"*_.,;:!?<>[](){}"


@dataclass
class ParsedReply:
    """What was read from a reply.

    Attributes:
        thought: the reasoning before the action ("" when there was none).
        raw_action: the action text as written, before matching.
        action: the action to send to the environment, or None when nothing usable was found.
        match: how `action` was found: "exact", "normalised", "contained", "fuzzy", "free"
            (no admissible list to match against), or "none".
        score: similarity of the fuzzy match (1.0 for exact matches).
        error: why the reply could not be used, phrased as feedback for the model
            (`prompts.feedback`).
    """

    thought: str
    raw_action: str
    action: str | None
    match: str
    score: float = 0.0
    error: str | None = None


normalise = normalise_action


def _clean(text: str) -> str:
    line = text.strip().split("\n", 1)[0]
    return line.strip(_STRIP_CHARS).strip()


def split_reply(text: str) -> tuple[str, str]:
    """Split a reply into `(thought, action_text)`; either may be empty.

    The last `Action:` marker wins (models sometimes restate the format before answering).
    Without a marker, the first non-empty line that is not a thought is the action.
    """
    text = text or ""
    actions = list(_ACTION_RE.finditer(text))
    thought_m = _THOUGHT_RE.search(text)
    if actions:
        last = actions[-1]
        action_text = _clean(text[last.end() :])
        t_end = actions[-1].start()
        thought = text[thought_m.end() : t_end] if thought_m and thought_m.end() <= t_end else ""
        if not action_text and len(actions) > 1:
            action_text = _clean(text[actions[-2].end() :])
        return thought.strip(), action_text
    if thought_m:
        rest = text[thought_m.end() :].strip()
        lines = [ln for ln in rest.split("\n") if ln.strip()]
        thought = lines[0].strip() if lines else ""
        action_text = _clean(lines[1]) if len(lines) > 1 else ""
        return thought, action_text
    lines = [ln for ln in text.split("\n") if ln.strip()]
    return "", _clean(lines[0]) if lines else ""


def match_action(raw_action: str, admissible: list[str], threshold: float = 0.75) -> tuple[str | None, str, float]:
    """Map `raw_action` onto one of `admissible`: exact, normalised, contained, then fuzzy.

    "contained" takes the admissible action that appears first in the reply (a reply that
    copies the whole list means its first item); "fuzzy" needs a similar verb, so
    "take candle" never becomes "examine candle".

    Returns `(action or None, match kind, score)`.
    """
    if not raw_action or not admissible:
        return None, "none", 0.0
    if raw_action in admissible:
        return raw_action, "exact", 1.0
    norm = normalise(raw_action)
    if not norm:
        return None, "none", 0.0
    by_norm = {normalise(a): a for a in admissible}
    if norm in by_norm:
        return by_norm[norm], "normalised", 1.0
    padded = f" {norm} "
    contained = [(padded.find(f" {n} "), -len(n), a) for n, a in by_norm.items() if n and f" {n} " in padded]
    if contained:
        return min(contained)[2], "contained", 1.0
    verb = norm.split()[0]
    best_action, best_score = None, 0.0
    for n, a in by_norm.items():
        if not n or SequenceMatcher(None, verb, n.split()[0]).ratio() < _VERB_SIMILARITY:
            continue
        score = SequenceMatcher(None, norm, n).ratio()
        if score > best_score:
            best_action, best_score = a, score
    if best_score >= threshold:
        return best_action, "fuzzy", best_score
    return None, "none", best_score


def parse_reply(text: str, admissible: list[str] | None = None, threshold: float = 0.75) -> ParsedReply:
    """Read a thought and an action from `text`; never raises.

    With `admissible` given, the action is mapped onto it (see `match_action`); otherwise
    the action is taken as written ("free").
    """
    try:
        thought, raw_action = split_reply(text)
    except Exception as exc:  # a parser bug must cost a step, not the run
        return ParsedReply("", "", None, "none", error=unreadable_note(exc))
    if not raw_action:
        return ParsedReply(thought, "", None, "none", error=no_action_note())
    if admissible is None:
        return ParsedReply(thought, raw_action, raw_action, "free", 1.0)
    action, kind, score = match_action(raw_action, admissible, threshold)
    if action is None:
        return ParsedReply(
            thought,
            raw_action,
            None,
            "none",
            score,
            error=invalid_action_note(raw_action),
        )
    return ParsedReply(thought, raw_action, action, kind, score)
