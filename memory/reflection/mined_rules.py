"""Mined rules: a reflector that needs no model, only the bank's statistics.

    report = mine_rules(bank, "keyroom")                   # `crl synth mine --family keyroom`
    report = mine_rules(bank, "keyroom", dry_run=True)     # what would be stored, nothing written
    print(report.summary()); rows = report.rows(); data = report.to_dict()

One mining run (id `mn-...`) reads the family's finished, non-quarantined played episodes,
counts candidates (`memory.reflection.mining_stats`: preconditions, sub-goal orderings, dead
ends), keeps those with at least `min_support` episodes, `min_confidence` and (dead ends) a
p-value at most `max_p_value`, the strongest `max_rules` of them, and stores them as ordinary
rule records of the family: author (`model`) "mined", tags `mined`, `mined:<kind>`,
`support=N`, `counter=N`, `confidence=X`, provenance the supporting episodes. From then on the
reflector votes on them like on its own rules, the retriever ranks them by those votes, and
prompts, `crl memory rules` and `crl explain` show them like any rule.

Idempotent: a rule's text is a function of what it relates, so its id is too
(`rule_record_id`); mining again only updates the statistics tags (votes are left alone), puts
a mined rule that fell below the thresholds in quarantine (tag `mined-stale`; out of prompts)
and releases it when it qualifies again. A mined rule that votes or a person removed is not
stored again (unless `revive_removed`); a pinned one is never quarantined.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from crl.memory.records import EpisodeRecord, RuleRecord, rule_record_id
from crl.memory.reflection.config import MiningConfig
from crl.memory.reflection.inputs import reflectable
from crl.memory.reflection.mining_stats import (
    MinedCandidate,
    best_per_action,
    dead_end_candidates,
    implied_orderings,
    ordering_candidates,
    precondition_candidates,
)
from crl.memory.storage.store import SEARCH_BUCKETS
from crl.memory.trajectory import Episode
from crl.prompts.untrusted import is_instruction_like

MINED_AUTHOR = "mined"
MINED_TAG = "mined"
STALE_TAG = "mined-stale"
STAT_PREFIXES = ("support=", "counter=", "confidence=")


@dataclass
class StoreChange:
    """What storing did to one rule: add, update, unchanged, quarantine, release or skip."""

    op: str
    rule_id: str
    text: str
    note: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"op": self.op, "rule_id": self.rule_id, "text": self.text, "note": self.note}


@dataclass
class MiningReport:
    """One mining run: the candidates (kept and dropped, with why) and what was stored."""

    id: str
    family: str
    episodes: int
    config: MiningConfig
    dry_run: bool = False
    candidates: list[MinedCandidate] = field(default_factory=list)
    changes: list[StoreChange] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def kept(self) -> list[MinedCandidate]:
        """Candidates above the thresholds, strongest first."""
        return [c for c in self.candidates if c.kept]

    @property
    def dropped(self) -> list[MinedCandidate]:
        """Candidates below a threshold (or outranked), each with its reason."""
        return [c for c in self.candidates if not c.kept]

    def summary(self) -> str:
        """One line, e.g. `mining mn-...: keyroom, 40 episodes, 3 rules kept of 57 candidates, 2 added`."""
        ops: dict[str, int] = {}
        for c in self.changes:
            ops[c.op] = ops.get(c.op, 0) + 1
        done = ", ".join(f"{n} {op}" for op, n in sorted(ops.items()) if op != "unchanged")
        return (
            f"mining {self.id}: {self.family}, {self.episodes} episode(s), {len(self.kept)} rule(s) kept of "
            f"{len(self.candidates)} candidate(s)"
            + (" (dry run: nothing stored)" if self.dry_run else f"; {done or 'nothing changed'}")
        )

    def rows(self, dropped: bool = False) -> list[dict[str, Any]]:
        """One row per kept candidate (and dropped ones with `dropped`), for a table."""
        stored = {c.rule_id: c.op for c in self.changes}
        shown = self.candidates if dropped else self.kept
        return [
            {
                "kind": c.kind,
                "support": c.support,
                "counter": c.counter,
                "confidence": f"{c.confidence:.2f}",
                "kept": "yes" if c.kept else "no",
                "text": c.text,
                "note": c.reason or stored.get(rule_record_id(self.family, c.text), ""),
            }
            for c in shown
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "family": self.family,
            "episodes": self.episodes,
            "dry_run": self.dry_run,
            "seconds": round(self.seconds, 3),
            "config": self.config.model_dump(mode="json"),
            "kept": len(self.kept),
            "candidates": [c.to_dict() for c in self.candidates],
            "changes": [c.to_dict() for c in self.changes],
        }


def new_mining_id() -> str:
    """A sortable, unique mining run id such as `mn-20261129-221530-3fa2`."""
    return "mn-" + time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


def mined_episodes(
    bank, family: str, include_synthetic: bool = False, verified_only: bool = True
) -> list[tuple[str, Episode]]:
    """(record id, episode) of every finished, non-quarantined episode of `family`, oldest first;
    with `verified_only`, not the successes the environment did not verify (an import's claims)."""
    records = [
        r
        for r, _ in bank.view.scan("episode", [family], SEARCH_BUCKETS, documents=True)
        if isinstance(r, EpisodeRecord) and reflectable(r, verified_only) and (include_synthetic or r.source == "real")
    ]
    records.sort(key=lambda r: (r.created_at, r.id))
    return [(r.id, r.to_episode()) for r in records]


def judge(candidates: list[MinedCandidate], config: MiningConfig) -> None:
    """Mark each candidate kept or dropped (with the reason), strongest `max_rules` kept."""
    for c in candidates:
        c.kept, c.reason = False, ""
        if is_instruction_like(c.text):
            c.reason = "instruction-like text (an action or place copied from a planted instruction)"
        elif c.support < config.min_support:
            c.reason = f"support {c.support} < {config.min_support}"
        elif c.confidence < config.min_confidence:
            c.reason = f"confidence {c.confidence:.2f} < {config.min_confidence:g}"
        elif c.p_value is not None and c.p_value > config.max_p_value:
            c.reason = f"p-value {c.p_value:.3f} > {config.max_p_value:g}: as likely by the success rate alone"
        else:
            c.kept = True
    best_per_action(candidates, config.max_per_action)
    implied_orderings(candidates)
    ranked = sorted((c for c in candidates if c.kept), key=lambda c: (c.strength, c.text), reverse=True)
    for c in ranked[config.max_rules :]:
        c.kept, c.reason = False, f"outranked: only the {config.max_rules} strongest mined rules are kept"
    candidates.sort(key=lambda c: (not c.kept, (-c.strength[0], -c.strength[1]), c.kind, c.text))


def mine_rules(
    bank, family: str, *, config: MiningConfig | None = None, dry_run: bool = False, actor: str | None = None
) -> MiningReport:
    """Mine precondition, ordering and dead-end rules of `family` and (unless `dry_run`) store them.

    Args:
        bank: the open `ExperienceBank`.
        family: the task family (`keyroom`).
        config: `settings.reflect.mine` (defaults when None).
        dry_run: count and judge only; write nothing.
        actor: who is recorded in the journal (default `mine:<run id>`).

    Returns:
        The report: every candidate with its support, confidence, and whether it was kept
        (why not), and the changes made to the rule set.
    """
    from crl.memory.synthesis.segments import given_at_start

    t0 = time.perf_counter()
    config = config or MiningConfig()
    report = MiningReport(new_mining_id(), family, 0, config, dry_run)
    flush = getattr(bank, "flush", None)
    if flush is not None:
        flush()
    episodes = mined_episodes(bank, family, config.include_synthetic)
    report.episodes = len(episodes)
    given = {rid: given_at_start(ep) for rid, ep in episodes}
    report.candidates = (
        precondition_candidates(episodes)
        + ordering_candidates(episodes, given)
        + dead_end_candidates(episodes, family, config.place_pattern)
    )
    judge(report.candidates, config)
    if not dry_run:
        report.changes = store_mined(bank, report, actor or f"mine:{report.id}")
    report.seconds = time.perf_counter() - t0
    return report


def stat_tags(candidate: MinedCandidate) -> list[str]:
    """The tags a stored mined rule carries: what it is and its current statistics."""
    return [
        MINED_TAG,
        f"mined:{candidate.kind}",
        f"support={candidate.support}",
        f"counter={candidate.counter}",
        f"confidence={candidate.confidence:.2f}",
    ]


def is_mined(rule: RuleRecord) -> bool:
    """Whether a rule was stored by mining."""
    return MINED_TAG in rule.tags


def _removed_before(bank, rule_id: str) -> bool:
    return any(h.entry.op == "rm" and not h.cancelled for h in bank.history(rule_id))


def store_mined(bank, report: MiningReport, actor: str) -> list[StoreChange]:
    """Write the report's kept rules into the bank and retire mined rules no longer kept
    (see the module docstring); returns what changed."""
    family, config = report.family, report.config
    existing = {r.id: r for r in bank.rules(family, include_quarantine=True) if r.scope == family}
    changes: list[StoreChange] = []
    kept_ids = set()
    for c in report.kept:
        rid = rule_record_id(family, c.text)
        kept_ids.add(rid)
        tags = stat_tags(c)
        rule = existing.get(rid)
        if rule is None:
            if not config.revive_removed and _removed_before(bank, rid):
                changes.append(
                    StoreChange("skip", rid, c.text, "removed earlier (by votes or a person): not stored again")
                )
                continue
            bank.add_rule(
                c.text,
                scope=family,
                provenance=c.episodes[-config.max_provenance :],
                score=config.score,
                actor=actor,
                model=MINED_AUTHOR,
                reflection=report.id,
            )
            bank.tag(rid, tags, actor)
            changes.append(StoreChange("add", rid, c.text, f"support {c.support}, confidence {c.confidence:.2f}"))
            continue
        stale = [t for t in rule.tags if t.startswith(STAT_PREFIXES) and t not in tags]
        fresh = [t for t in tags if t not in rule.tags]
        if stale:
            bank.untag(rid, stale, actor)
        if fresh:
            bank.tag(rid, fresh, actor)
        if rule.tier == "quarantine" and STALE_TAG in rule.tags:
            bank.release(rid, actor)
            bank.untag(rid, [STALE_TAG], actor)
            changes.append(StoreChange("release", rid, rule.text, "above the thresholds again"))
        elif stale or fresh:
            changes.append(StoreChange("update", rid, rule.text, f"support {c.support}, confidence {c.confidence:.2f}"))
        else:
            changes.append(StoreChange("unchanged", rid, rule.text))
    for rid, rule in existing.items():
        if rid in kept_ids or not is_mined(rule) or rule.tier != "regular":
            continue
        bank.quarantine(rid, actor)
        bank.tag(rid, [STALE_TAG], actor)
        changes.append(StoreChange("quarantine", rid, rule.text, "no longer above the mining thresholds"))
    return changes
