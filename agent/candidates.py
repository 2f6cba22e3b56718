"""The actions the posterior scores where a task lists none (ScienceWorld).

ScienceWorld accepts hundreds to thousands of actions per step (`valid_actions()`), too many to
score every step, and its observation lists none. The candidate set stands in for the list: the
model's free reply mapped onto the valid actions nearest to it, plus the actions memory's
nearest stored steps took that are valid now, capped. Every candidate is a valid action, so the
posterior can only choose valid actions.

Order (each action once, with every source that named it):

1. "reply": the valid action the free reply names (case, punctuation and articles ignored).
2. "memory": memory's actions valid now, in the order given (best first), adding at most a
   third of the cap (one already named by the reply is only tagged).
3. "generic": cheap actions that help anywhere (`GENERIC_ACTIONS`), when the task offers them.
4. "nearest": the other valid actions most similar to the reply: first those sharing words
   with it (linking words such as "to" and "on" do not count), by shared words (Dice), then
   spelling (difflib), at most `PER_VERB` per first word while others remain; then those
   sharing none, one per first word in turn (shortest first), so an
   empty or unreadable reply still yields a varied set. Actions starting with a guarded prefix
   (`GUARDED_PREFIXES`: "focus on", irreversible in ScienceWorld) come in by nearness only when
   the reply itself starts with that prefix: the model asked for that kind of action and the
   scoring decides which object.

Actions already tried in this situation stay candidates (memory may value them, and the
posterior's repeat avoidance needs to see them), but go after the untried ones, so the cap
drops them first. Actions an environment lists but refuses to play (`REFUSED_ACTIONS`:
ScienceWorld's "reset task", which would undo the episode) are never candidates.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any, Protocol, runtime_checkable

from crl.tasks.actions import normalise_action

DEFAULT_CAP = 12
GENERIC_ACTIONS = ("look around",)
GUARDED_PREFIXES = ("focus on",)
PER_VERB = 3
REFUSED_ACTIONS = frozenset({"reset task"})
LINKING_WORDS = frozenset({"to", "on", "in", "at", "of", "into", "from", "with", "and"})


@runtime_checkable
class ListsValidActions(Protocol):
    """An environment that lists the actions it accepts now, on demand (`SciWorldEnv`), for tasks
    whose observations carry no admissible list."""

    def valid_actions(self) -> list[str]: ...


@dataclass
class CandidateSet:
    """The actions to score at one step and where each came from.

    Attributes:
        actions: the candidates, in the order above, at most the cap.
        sources: action -> the sources that named it ("reply", "memory", "generic", "nearest").
        reply: the free reply's action text as parsed (None when there was none).
        valid: how many actions the environment accepted at this step.
    """

    actions: list[str]
    sources: dict[str, list[str]] = field(default_factory=dict)
    reply: str | None = None
    valid: int = 0

    @property
    def reply_matched(self) -> bool:
        """Whether the free reply named a valid action itself."""
        return any("reply" in s for s in self.sources.values())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for the step record's posterior entry."""
        return {
            "reply": self.reply,
            "reply_matched": self.reply_matched,
            "valid": self.valid,
            "sources": {a: list(self.sources.get(a, ())) for a in self.actions},
        }


def build_candidates(
    valid: Sequence[str],
    reply: str | None,
    memory: Iterable[str] = (),
    tried: Collection[str] = (),
    cap: int = DEFAULT_CAP,
    generic: Sequence[str] = GENERIC_ACTIONS,
    guarded: Sequence[str] = GUARDED_PREFIXES,
    refused: Collection[str] = REFUSED_ACTIONS,
) -> CandidateSet:
    """The candidate set for one step (module docstring).

    Args:
        valid: every action the environment accepts now.
        reply: the model's free reply, parsed to an action text; None or prose is fine.
        memory: actions memory's nearest stored steps took, best first; those not valid now are
            dropped.
        tried: actions already taken in this situation (ordered last).
        cap: the most candidates returned.
        generic: actions included whenever valid (`GENERIC_ACTIONS`).
        guarded: prefixes of actions that enter by nearness only when the reply starts with them.
        refused: actions never offered, even when listed as valid (`REFUSED_ACTIONS`).

    Returns:
        The `CandidateSet`; empty only when `valid` is.

    Example:
        >>> s = build_candidates(["open door to kitchen", "look around", "eat apple"], "Open the door to kitchen.")
        >>> s.actions, s.sources["open door to kitchen"]
        (['open door to kitchen', 'look around', 'eat apple'], ['reply'])
    """
    if cap < 1:
        raise ValueError(f"the candidate cap must be at least 1, got {cap}")
    by_key: dict[str, str] = {}
    refused_keys = {normalise_action(a) for a in refused}
    for action in valid:
        key = normalise_action(action)
        if key not in refused_keys:
            by_key.setdefault(key, action)
    tried_keys = {normalise_action(a) for a in tried}
    key = normalise_action(reply or "")
    picked: dict[str, list[str]] = {}

    def add(action: str, source: str) -> None:
        sources = picked.setdefault(action, [])
        if source not in sources:
            sources.append(source)

    if key in by_key:
        add(by_key[key], "reply")
    memory_slots = max(1, cap // 3)
    for action in memory:
        match = by_key.get(normalise_action(action))
        if match is not None and (match in picked or memory_slots > 0):
            memory_slots -= match not in picked
            add(match, "memory")
    for action in generic:
        match = by_key.get(normalise_action(action))
        if match is not None:
            add(match, "generic")

    def untried(actions: Iterable[str]) -> int:
        return sum(normalise_action(a) not in tried_keys for a in actions)

    if untried(picked) < cap:
        allowed = [(k, a) for k, a in by_key.items() if a not in picked and _open(k, key, guarded)]
        for action in _nearest(key, allowed):
            add(action, "nearest")
            if untried(picked) >= cap:
                break
    ordered = sorted(picked, key=lambda a: normalise_action(a) in tried_keys)[:cap]
    return CandidateSet(ordered, {a: picked[a] for a in ordered}, reply, len(by_key))


def _open(action_key: str, reply_key: str, guarded: Sequence[str]) -> bool:
    """Whether `action_key` may enter by nearness to the reply."""
    return not any(action_key.startswith(p) and not reply_key.startswith(p) for p in guarded)


def _nearest(reply_key: str, allowed: list[tuple[str, str]]) -> list[str]:
    """`allowed` (key, action) pairs in the order of the module docstring's step 4."""
    words = set(reply_key.split()) - LINKING_WORDS
    sharing, other = [], []
    for k, action in allowed:
        theirs = set(k.split()) - LINKING_WORDS
        common = len(words & theirs)
        if common:
            dice = 2 * common / (len(words) + len(theirs))
            sharing.append((-dice, -SequenceMatcher(None, reply_key, k).ratio(), len(k), k, action))
        else:
            other.append((len(k), k, action))
    per_verb: dict[str, int] = {}
    first, rest = [], []
    for *_, k, action in sorted(sharing):
        verb = k.split()[0]
        per_verb[verb] = per_verb.get(verb, 0) + 1
        (first if per_verb[verb] <= PER_VERB else rest).append(action)
    return first + rest + _by_verb_in_turn(sorted(other))


def _by_verb_in_turn(ranked: list[tuple[int, str, str]]) -> list[str]:
    """(length, key, action) triples, one per first word in turn, each verb's in the given order."""
    queues: dict[str, list[str]] = {}
    for _, k, action in ranked:
        queues.setdefault(k.split()[0] if k else "", []).append(action)
    out: list[str] = []
    while queues:
        for verb in list(queues):
            out.append(queues[verb].pop(0))
            if not queues[verb]:
                del queues[verb]
    return out
