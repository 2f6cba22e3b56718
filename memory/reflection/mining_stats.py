"""Rule candidates counted from episodes: preconditions, sub-goal orderings and dead ends.

Family-generic: actions are compared as text (lower case, spaces collapsed), a step "worked"
when it was valid and the environment did not report it invalid (`info["invalid"]`), sub-goals
come from the steps' `info["subgoals"]`, and outcomes from the episodes. Counts are of
episodes, so an agent repeating one failure in a loop counts once.

    precondition  "'A' fails unless 'B' was done earlier."
                  support: episodes where A failed with no B before, or worked with B before;
                  confidence: of the episodes where A worked, the share that had done B first;
                  needs at least one failure of A without B (else B merely always came first).
    ordering      "'A2' succeeds only after 'A1'." (the actions that first reached sub-goals
                  S2 and S1; "Reach sub-goal 'S2' only after sub-goal 'S1'." when no single
                  action reaches them in most episodes)
                  support: episodes that reached S2 after S1 (S1 given at the start counts);
                  confidence: their share of the episodes that reached S2.
    dead end      "'A' from the P never led to success in F."
                  support: episodes of winnable tasks (won at least once) that did A at place P,
                  none of which succeeded, while other episodes at P did; p-value: the chance of
                  that many failures at the family's success rate alone.

Example:
    Three episodes fail "unlock door with brass key" before "take brass key" and succeed after it:
    `precondition_candidates` yields "'unlock door with brass key' fails unless 'take brass key'
    was done earlier." with support 3 and confidence 1.0.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from crl.memory.trajectory import Episode, Step

RuleKind = Literal["precondition", "ordering", "dead_end"]
DOMINANT_SHARE = 0.5


@dataclass
class MinedCandidate:
    """One rule the statistics suggest, with its evidence.

    Attributes:
        kind: precondition, ordering or dead_end.
        key: what the rule relates: (action, the action needed first), (earlier sub-goal,
            later sub-goal) or (action, place or "").
        text: the rule as the template phrases it (its identity: the same evidence, the same text).
        support: episodes that show the rule.
        counter: episodes that contradict it.
        confidence: the share of the episodes bearing on it that agree (see the module docstring).
        episodes: ids of the supporting episodes, oldest first.
        p_value: dead ends only: the chance of the failures at the family's success rate.
        kept: whether it passed the thresholds; `reason` says why not.
    """

    kind: RuleKind
    key: tuple[str, str]
    text: str
    support: int
    counter: int
    confidence: float
    episodes: list[str] = field(default_factory=list)
    p_value: float | None = None
    kept: bool = False
    reason: str = ""

    @property
    def strength(self) -> tuple[float, int]:
        """How strongly the data back it: confidence, then support."""
        return (round(self.confidence, 6), self.support)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "text": self.text,
            "support": self.support,
            "counter": self.counter,
            "confidence": round(self.confidence, 4),
            "p_value": None if self.p_value is None else round(self.p_value, 6),
            "episodes": list(self.episodes),
            "kept": self.kept,
            "reason": self.reason,
        }


def normalise(action: str) -> str:
    """An action as mined rules compare it: lower case, spaces collapsed, no final full stop."""
    return " ".join(str(action).lower().split()).rstrip(".")


def worked(step: Step) -> bool:
    """Whether a step's action was accepted: valid, and not reported invalid by the environment."""
    return bool(step.valid and step.action and not (isinstance(step.info, dict) and step.info.get("invalid")))


def place_of(observation: str, pattern: re.Pattern[str]) -> str | None:
    """Where an observation says the agent is (the pattern's first non-empty group), or None."""
    match = pattern.search(observation or "")
    if match is None:
        return None
    found = next((g for g in match.groups() if g), None) or match.group(0)
    return " ".join(found.split()).lower() or None


def _ratio(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


# ---- preconditions ---------------------------------------------------------------------------


def precondition_candidates(episodes: Sequence[tuple[str, Episode]]) -> list[MinedCandidate]:
    """Every "'A' fails unless 'B' was done earlier" with at least one failure of A without B.

    Args:
        episodes: (record id, episode) pairs.
    """
    # action -> B -> sets of episode ids; and action -> episodes where it worked / failed at all
    worked_with: dict[str, dict[str, set[str]]] = {}
    worked_in: dict[str, set[str]] = {}
    failures: dict[str, list[tuple[str, frozenset[str]]]] = {}
    for rid, episode in episodes:
        done: set[str] = set()
        for step in episode.steps:
            action = normalise(step.action)
            if not action:
                continue
            if worked(step):
                worked_in.setdefault(action, set()).add(rid)
                for before in done - {action}:
                    worked_with.setdefault(action, {}).setdefault(before, set()).add(rid)
                done.add(action)
            else:
                failures.setdefault(action, []).append((rid, frozenset(done)))
    out = []
    for action, befores in worked_with.items():
        failed = failures.get(action)
        if not failed:
            continue
        for before, with_before in befores.items():
            fails_without = {rid for rid, done in failed if before not in done}
            if not fails_without:
                continue
            works = worked_in[action]
            out.append(
                MinedCandidate(
                    kind="precondition",
                    key=(action, before),
                    text=f"'{action}' fails unless '{before}' was done earlier.",
                    support=len(with_before | fails_without),
                    counter=len(works - with_before),
                    confidence=_ratio(len(with_before), len(works)),
                    episodes=sorted(with_before | fails_without),
                )
            )
    return out


def best_per_action(candidates: Iterable[MinedCandidate], limit: int) -> list[MinedCandidate]:
    """Among kept preconditions of one action, mark all but the `limit` strongest as dropped."""
    groups: dict[str, list[MinedCandidate]] = {}
    for c in candidates:
        if c.kind == "precondition" and c.kept:
            groups.setdefault(c.key[0], []).append(c)
    dropped = []
    for group in groups.values():
        group.sort(key=lambda c: (c.strength, c.text), reverse=True)
        for c in group[limit:]:
            c.kept, c.reason = False, f"a stronger precondition explains the same action: {group[0].text}"
            dropped.append(c)
    return dropped


# ---- orderings ----------------------------------------------------------------------------------


def first_reached(episode: Episode, given: Iterable[str] = ()) -> dict[str, int]:
    """Sub-goal -> index of the step that first reached it (-1: granted at the start)."""
    reached = dict.fromkeys(given, -1)
    for step in episode.steps:
        subgoals = step.info.get("subgoals") if isinstance(step.info, dict) else None
        if isinstance(subgoals, dict):
            for name, hit in subgoals.items():
                if hit and str(name) not in reached:
                    reached[str(name)] = step.index
    return reached


def _label(subgoal: str, by: Counter[str]) -> tuple[str, bool]:
    """The action that reaches `subgoal` in most episodes, else the sub-goal's name."""
    if by:
        action, n = by.most_common(1)[0]
        if n > DOMINANT_SHARE * sum(by.values()):
            return action, True
    return subgoal, False


def ordering_candidates(
    episodes: Sequence[tuple[str, Episode]], given: dict[str, set[str]] | None = None
) -> list[MinedCandidate]:
    """Every "S2 only after S1" for sub-goals that some episode reached in that order.

    Args:
        episodes: (record id, episode) pairs.
        given: record id -> sub-goals its task grants at the start (e.g. `keyroom/door` has the key).
    """
    given = given or {}
    reached = {rid: first_reached(ep, given.get(rid, ())) for rid, ep in episodes}
    by_action: dict[str, Counter[str]] = {}
    for rid, ep in episodes:
        steps = {s.index: s for s in ep.steps}
        for name, index in reached[rid].items():
            if index >= 0 and index in steps and normalise(steps[index].action):
                by_action.setdefault(name, Counter())[normalise(steps[index].action)] += 1
    names = sorted({n for r in reached.values() for n in r})
    out = []
    for later in names:
        achieved = [rid for rid, _ in episodes if reached[rid].get(later, -1) >= 0]
        for earlier in names:
            if earlier == later:
                continue
            after = [rid for rid in achieved if _before(reached[rid], earlier, later)]
            if not after:
                continue
            out.append(
                MinedCandidate(
                    kind="ordering",
                    key=(earlier, later),
                    text=_ordering_text(earlier, later, by_action),
                    support=len(after),
                    counter=len(achieved) - len(after),
                    confidence=_ratio(len(after), len(achieved)),
                    episodes=sorted(after),
                )
            )
    return out


def _before(reached: dict[str, int], earlier: str, later: str) -> bool:
    first = reached.get(earlier)
    return first is not None and first < reached[later]


def _ordering_text(earlier: str, later: str, by_action: dict[str, Counter[str]]) -> str:
    first, first_is_action = _label(earlier, by_action.get(earlier, Counter()))
    then, then_is_action = _label(later, by_action.get(later, Counter()))
    if first_is_action and then_is_action:
        return f"'{then}' succeeds only after '{first}'."
    return f"Reach sub-goal '{later}' only after sub-goal '{earlier}'."


def implied_orderings(candidates: Iterable[MinedCandidate]) -> list[MinedCandidate]:
    """Mark kept orderings that follow from two other kept ones (a<b and b<c make a<c) as dropped."""
    kept = [c for c in candidates if c.kind == "ordering" and c.kept]
    after: dict[str, set[str]] = {}
    for c in kept:
        after.setdefault(c.key[0], set()).add(c.key[1])
    dropped = []
    for c in kept:
        first, then = c.key
        via = sorted(m for m in after.get(first, set()) if m != then and then in after.get(m, set()))
        if via:
            c.kept, c.reason = False, f"implied by the orderings through sub-goal '{via[0]}'"
            dropped.append(c)
    return dropped


# ---- dead ends ----------------------------------------------------------------------------------


def dead_end_candidates(
    episodes: Sequence[tuple[str, Episode]], family: str, place_pattern: str
) -> list[MinedCandidate]:
    """Every "'A' from P never led to success": actions at a place done only in failed episodes.

    Only tasks won at least once count (a task never won would make every action a dead end),
    and only places where some episode went on to succeed (else the place is the dead end).
    """
    pattern = re.compile(place_pattern)
    won = {ep.task.split("?", 1)[0] for _, ep in episodes if ep.success}
    pool = [(rid, ep) for rid, ep in episodes if ep.task.split("?", 1)[0] in won]
    if not pool:
        return []
    rate = _ratio(sum(ep.success for _, ep in pool), len(pool))
    seen: dict[tuple[str, str | None], set[str]] = {}
    places_won: set[str | None] = set()
    outcome = {rid: ep.success for rid, ep in pool}
    for rid, ep in pool:
        for step in ep.steps:
            if not worked(step):
                continue
            place = place_of(step.observation, pattern)
            seen.setdefault((normalise(step.action), place), set()).add(rid)
            if ep.success:
                places_won.add(place)
    out = []
    for (action, place), rids in seen.items():
        if any(outcome[r] for r in rids) or place not in places_won:
            continue
        where = f" from the {place}" if place else ""
        out.append(
            MinedCandidate(
                kind="dead_end",
                key=(action, place or ""),
                text=f"'{action}'{where} never led to success in {family}.",
                support=len(rids),
                counter=0,
                confidence=1.0,
                episodes=sorted(rids),
                p_value=(1.0 - rate) ** len(rids),
            )
        )
    return out
