"""Applying a reflection's rule operations to the bank: vote arithmetic, dedupe, contradictions, cap.

Scores follow ExpeL (Zhao et al. 2023), with the amounts in `ReflectorConfig`:

    ADD         a new rule at score 2
    AGREE       +1 (UPVOTE is the same)
    EDIT        new text, +1
    DOWNVOTE    -1
    REMOVE      -1, or -3 while the rule's scope is at its cap (ExpeL's "list full"):
                REMOVE never deletes outright, so one reply cannot wipe a well-supported rule
    score <= 0  the rule is deleted (a journalled `rm`)

Operations are applied in ExpeL's order: REMOVE and DOWNVOTE, then AGREE, EDIT, ADD. Each
rule takes at most one operation per reply (no vote stuffing), and at most `max_ops`
operations count. Pinned rules (tier golden, `crl memory rules pin`) are never edited,
removed or deleted by the reflector; their score still moves.

Near-duplicates: an ADD (or EDIT) whose text has cosine similarity >= `dedupe_threshold`
to a live rule of the same polarity is an AGREE on that rule instead.

Contradictions, kept simple: two texts similar by >= `contradiction_threshold` whose
polarity differs (an odd number of negation words such as not, never, avoid in one and
an even number in the other) contradict. The existing rule is downvoted; if it is left
with fewer votes than the newcomer would start with (or none), it is deleted and the
newcomer stored; otherwise the newcomer is dropped. So the votes decide, and two
contradicting rules never stand side by side. The heuristic misses contradictions
without negation words and flags rephrasings like "never try the door before taking the
key" against "take the key before the door"; the votes then correct it over time.

Cap: after a reply is applied, a scope over its cap (`max_rules`, or `max_critiques` for
one game) loses its lowest-scored unpinned rules, newest first among equals, so an
established rule beats a newcomer with the same score.

Every change is one journal entry with actor `reflect:<reflection id>`, the reflection id
and the episode ids it came from, so `bank.history(rule_id)` tells each rule's story.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from crl.memory.records import RuleRecord
from crl.memory.reflection.config import ReflectorConfig
from crl.memory.reflection.rule_ops import Rejected, RuleOp, clean_rule_text

NEGATIONS = frozenset({"not", "no", "never", "avoid", "without", "cannot", "nothing", "neither", "nor", "stop", "dont"})
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
APPLY_ORDER = {"REMOVE": 0, "DOWNVOTE": 0, "AGREE": 1, "EDIT": 2, "ADD": 3}


def polarity(text: str) -> int:
    """1 when a text holds an odd number of negation words (not, never, avoid, ...n't), else 0.

    Example:
        >>> polarity("Do not open the door."), polarity("Open the door."), polarity("Never don't.")
        (1, 0, 0)
    """
    words = _WORD.findall(text.lower())
    return sum(1 for w in words if w in NEGATIONS or w.endswith("n't")) % 2


def _norm(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


@dataclass(frozen=True)
class RuleTarget:
    """Where a reflection's new rules go: a family, optionally one variant, optionally one game."""

    family: str
    variant: str | None = None
    seed: int | None = None

    @property
    def label(self) -> str:
        """e.g. `keyroom`, `keyroom/key`, `keyroom/key#3`."""
        label = self.family if self.variant is None else f"{self.family}/{self.variant}"
        return label if self.seed is None else f"{label}#{self.seed}"


def scope_key(rule: RuleRecord) -> tuple[str, str | None, int | None]:
    """The scope a rule counts against for the cap."""
    return rule.scope, rule.variant, rule.seed


@dataclass
class RuleChange:
    """One change made to the rule set: what, to which rule, its score after, and why."""

    op: str
    rule_id: str
    text: str
    score: float | None
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"op": self.op, "rule_id": self.rule_id, "text": self.text, "score": self.score, "note": self.note}


@dataclass
class EditResult:
    """What applying one reply did: operations accepted (with a note when transformed),
    operations rejected with their reason, and the changes made."""

    accepted: list[tuple[RuleOp, str]] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    changes: list[RuleChange] = field(default_factory=list)


@dataclass
class _Live:
    rule: RuleRecord
    vector: np.ndarray | None

    @property
    def pinned(self) -> bool:
        return self.rule.tier == "golden"


class RuleEditor:
    """Applies parsed operations to the rules of one game's scope in the bank.

    Args:
        bank: the `ExperienceBank`.
        config: the reflector settings (scores, thresholds, caps).
        reflection: the reflection run id recorded with every change.
        model: the name of the model that wrote the operations (stored on new rules).
    """

    def __init__(self, bank, config: ReflectorConfig, reflection: str, model: str):
        self.bank = bank
        self.config = config
        self.reflection = reflection
        self.model = model
        self.actor = f"reflect:{reflection}"

    # ---- reading -------------------------------------------------------------------------

    def live_rules(self, game: RuleTarget) -> list[tuple[RuleRecord, np.ndarray | None]]:
        """The rules a reflection on `game` sees and may change: those of its family that apply
        to it (not 'all' rules, not quarantined), best score first."""
        out = [
            (r, v)
            for r, v in self.bank.view.scan("rule", embeddings=True)
            if r.scope == game.family and r.tier != "quarantine" and r.applies_to(game.family, game.variant, game.seed)
        ]
        out.sort(key=lambda rv: (-rv[0].score, rv[0].created_at, rv[0].id))
        return out  # type: ignore[return-value]

    def cap_of(self, key: tuple[str, str | None, int | None]) -> int:
        """The cap of a scope: `max_critiques` for one game, else `max_rules`."""
        return self.config.max_critiques if key[2] is not None else self.config.max_rules

    # ---- applying ------------------------------------------------------------------------

    def apply(
        self,
        ops: Sequence[RuleOp],
        shown: Sequence[RuleRecord],
        target: RuleTarget,
        provenance: Sequence[str],
        game: RuleTarget | None = None,
    ) -> EditResult:
        """Apply one reply's operations.

        Args:
            ops: the parsed operations.
            shown: the rules the prompt listed; operation numbers refer to this list.
            target: where new rules go.
            provenance: episode record ids the reply came from.
            game: the game reflected on, whose rules are checked for duplicates and
                contradictions (default `target`; it must cover `target`).

        Never raises for a bad operation: it is rejected with its reason and the rule set
        stays as it was before that operation.
        """
        result = EditResult()
        self._provenance = list(provenance)
        self._live: dict[str, _Live] = {r.id: _Live(r, v) for r, v in self.live_rules(game or target)}
        self._result = result
        touched: set[str] = set()
        planned: list[tuple[RuleOp, str | None, str | None]] = []
        for i, op in enumerate(ops):
            if i >= self.config.max_ops:
                result.rejected.append(Rejected(op.raw, f"more than {self.config.max_ops} operations in one reply"))
                continue
            rid, why = self._resolve(op, shown)
            if why:
                result.rejected.append(Rejected(op.raw, why))
                continue
            text = None
            if op.kind in ("ADD", "EDIT"):
                text, why = clean_rule_text(op.text or "", self.config.max_rule_chars)
                if text is None:
                    result.rejected.append(Rejected(op.raw, why))
                    continue
            if rid is not None:
                live = self._live[rid]
                if live.pinned and op.kind in ("EDIT", "REMOVE"):
                    result.rejected.append(
                        Rejected(op.raw, f"{rid} is pinned: the reflector may not {op.kind.lower()} it")
                    )
                    continue
                if rid in touched:
                    result.rejected.append(Rejected(op.raw, "that rule already has an operation in this reply"))
                    continue
                touched.add(rid)
            planned.append((op, rid, text))
        planned.sort(key=lambda p: APPLY_ORDER[p[0].kind])
        for op, rid, text in planned:
            if op.kind in ("REMOVE", "DOWNVOTE"):
                assert rid is not None
                self._downvote(op, rid)
            elif op.kind == "AGREE":
                assert rid is not None
                self._vote(rid, self.config.agree_delta, "AGREE")
                result.accepted.append((op, ""))
            elif op.kind == "EDIT":
                assert rid is not None and text is not None
                self._edit(op, rid, text, touched)
            else:
                assert text is not None
                self._add(op, text, target, touched)
        self._enforce_cap(target)
        return result

    def _resolve(self, op: RuleOp, shown: Sequence[RuleRecord]) -> tuple[str | None, str]:
        """The id of the rule an operation names (None for ADD), or why it names none."""
        if op.kind == "ADD":
            return None, ""
        if op.number is not None:
            if not 1 <= op.number <= len(shown):
                listed = f"rules 1-{len(shown)}" if shown else "no rules"
                return None, f"no rule {op.number} in the list (it showed {listed})"
            rule = shown[op.number - 1]
        else:
            wanted = _norm(op.ref_text or "")
            matches = [r for r in shown if _norm(r.text) and (_norm(r.text) == wanted or _norm(r.text) in wanted)]
            if len(matches) != 1:
                return None, "no rule number, and the text names no single listed rule"
            rule = matches[0]
        if rule.id not in self._live:
            return None, f"rule {op.number or rule.id} was removed earlier in this reflection"
        return rule.id, ""

    def _vote(self, rid: str, delta: float, reason: str, note: str = "") -> float:
        """Add `delta` to a live rule's score (journalled); delete it at score <= 0 unless pinned."""
        live = self._live[rid]
        self.bank.vote_rule(
            rid, delta, self.actor, provenance=self._provenance, reflection=self.reflection, reason=reason
        )
        score = live.rule.score + delta
        live.rule = live.rule.model_copy(update={"score": score})
        self._result.changes.append(RuleChange(reason.lower(), rid, live.rule.text, score, note))
        if score <= 0 and not live.pinned:
            self._delete(rid, f"score {score:g} <= 0 after {reason} (reflection {self.reflection})")
        return score

    def _delete(self, rid: str, reason: str) -> None:
        live = self._live.pop(rid)
        self.bank.rm(rid, reason=reason, actor=self.actor)
        self._result.changes.append(RuleChange("delete", rid, live.rule.text, live.rule.score, reason))

    def _downvote(self, op: RuleOp, rid: str) -> None:
        delta = self.config.downvote_delta
        note = ""
        if op.kind == "REMOVE":
            key = scope_key(self._live[rid].rule)
            if sum(1 for lv in self._live.values() if scope_key(lv.rule) == key) >= self.cap_of(key):
                delta, note = self.config.remove_full_delta, "the scope is at its cap"
        self._vote(rid, -delta, op.kind, note)
        self._result.accepted.append((op, note))

    def _conflict(self, text: str, vector: np.ndarray, exclude: str | None = None) -> tuple[str | None, str | None]:
        """('duplicate' or 'contradiction', the live rule concerned), or (None, None)."""
        best: tuple[float, str, str] | None = None
        pol = polarity(text)
        for rid, live in self._live.items():
            if rid == exclude or live.vector is None:
                continue
            sim = float(np.dot(vector, live.vector))
            if polarity(live.rule.text) != pol:
                kind = "contradiction" if sim >= self.config.contradiction_threshold else None
            else:
                kind = (
                    "duplicate" if sim >= self.config.dedupe_threshold or _norm(text) == _norm(live.rule.text) else None
                )
            if kind and (best is None or sim > best[0]):
                best = (sim, kind, rid)
        return (best[1], best[2]) if best else (None, None)

    def _settle(self, other: str, newcomer_score: float) -> bool:
        """A newcomer contradicts live rule `other`: downvote it, and delete it when it is left
        with fewer votes than the newcomer. Returns whether the newcomer wins."""
        live = self._live[other]
        if live.pinned:
            return False
        score = self._vote(other, -self.config.downvote_delta, "DOWNVOTE", "contradicted by a new rule")
        if other in self._live and score < newcomer_score:
            self._delete(other, f"replaced by a contradicting rule with more votes (reflection {self.reflection})")
        return other not in self._live

    def _agree_instead(self, op: RuleOp, other: str, touched: set[str], duplicates: str, what: str) -> None:
        """A near-duplicate ADD or EDIT counts as AGREE on the rule it duplicates (once per reply)."""
        if other in touched:
            self._result.rejected.append(
                Rejected(op.raw, f"{duplicates} a rule that already has an operation in this reply")
            )
            return
        touched.add(other)
        self._vote(other, self.config.agree_delta, "AGREE", f"{what} that duplicated this rule")
        self._result.accepted.append((op, f"duplicates {other}: counted as AGREE on it"))

    def _edit(self, op: RuleOp, rid: str, text: str, touched: set[str]) -> None:
        vector = self.bank.embed([text])[0]
        kind, other = self._conflict(text, vector, exclude=rid)
        if kind == "duplicate" and other is not None:
            self._agree_instead(op, other, touched, "the new text duplicates", "an EDIT")
            return
        live = self._live[rid]
        if kind == "contradiction" and other is not None:
            if self._live[other].pinned:
                self._result.rejected.append(Rejected(op.raw, f"the new text contradicts pinned rule {other}"))
                return
            if not self._settle(other, live.rule.score + self.config.agree_delta):
                self._result.accepted.append(
                    (op, f"contradicts {other}, which keeps more votes: downvoted it, text unchanged")
                )
                return
        self.bank.edit_rule(
            rid,
            text,
            self.actor,
            delta=self.config.agree_delta,
            provenance=self._provenance,
            reflection=self.reflection,
        )
        score = live.rule.score + self.config.agree_delta
        live.rule = live.rule.model_copy(update={"text": text, "score": score})
        live.vector = vector
        self._result.changes.append(RuleChange("edit", rid, text, score))
        self._result.accepted.append((op, ""))

    def _add(self, op: RuleOp, text: str, target: RuleTarget, touched: set[str]) -> None:
        vector = self.bank.embed([text])[0]
        kind, other = self._conflict(text, vector)
        if kind == "duplicate" and other is not None:
            self._agree_instead(op, other, touched, "duplicates", "an ADD")
            return
        if kind == "contradiction" and other is not None:
            if self._live[other].pinned:
                self._result.rejected.append(Rejected(op.raw, f"contradicts pinned rule {other}"))
                return
            touched.add(other)
            if not self._settle(other, self.config.add_score):
                self._result.accepted.append((op, f"contradicts {other}, which keeps more votes: downvoted it instead"))
                return
        rid = self.bank.add_rule(
            text,
            scope=target.family,
            provenance=self._provenance,
            score=self.config.add_score,
            actor=self.actor,
            variant=target.variant,
            seed=target.seed,
            model=self.model,
            reflection=self.reflection,
        )
        rule = RuleRecord(
            id=rid,
            text=text,
            scope=target.family,
            score=self.config.add_score,
            provenance=self._provenance,
            variant=target.variant,
            seed=target.seed,
            model=self.model,
            reflections=[self.reflection],
            created_at=time.time(),
            updated_at=time.time(),
        )
        self._live[rid] = _Live(rule, vector)
        touched.add(rid)
        self._result.changes.append(RuleChange("add", rid, text, self.config.add_score, f"scope {target.label}"))
        self._result.accepted.append((op, ""))

    def _enforce_cap(self, target: RuleTarget) -> None:
        key = (target.family, target.variant, target.seed)
        cap = self.cap_of(key)
        members = [lv for lv in self._live.values() if scope_key(lv.rule) == key]
        excess = len(members) - cap
        if excess <= 0:
            return
        victims = sorted(
            (lv for lv in members if not lv.pinned), key=lambda lv: (lv.rule.score, -lv.rule.created_at, lv.rule.id)
        )
        for lv in victims[:excess]:
            self._delete(lv.rule.id, f"over the cap of {cap} rules for {target.label} (lowest score)")
