"""Malicious records and what they contaminated: the marks in the journal, and the rules and
synthetic episodes derived from them.

A curator marks records malicious with `ExperienceBank.quarantine_malicious` (`crl memory
quarantine --malicious ID`): one journalled `tier` entry that quarantines them and carries
`"malicious": true` with the reason. The marks are a fold over the journal's effective entries,
so they survive `rebuild` (and a rollback to before the mark cancels it, like any change):

    a malicious quarantine      marks its ids (an episode's mark covers its steps)
    a later move out of it      (`release`, `pin`, a review's accept) clears the mark of those ids

Removing a marked record (`rm`, eviction, `rebuild --drop-run`) does not clear the mark: the
adapters trained on it are still contaminated. Rules are traced through the journal, not the
rule records (a rule keeps its last 50 provenance ids; the journal keeps them all): a rule is
derived from a malicious episode when its `rule_add`, `rule_edit` or `rule_vote` entry names the
episode (or the episode of a malicious step) in its provenance.

`read_marks(memory_dir, namespace)` reads a namespace's marks straight from its journal file,
without the store lock, so `crl adapters ls` can flag adapters while a run owns the bank.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from crl.memory.records import episode_of_step, parse_record_id
from crl.memory.storage.journal import Journal, JournalEntry
from crl.memory.storage.journal_state import JournalState
from crl.memory.storage.namespaces import DEFAULT, SUBDIR, primary_namespace

MALICIOUS = "malicious"
"""The key of a `tier` entry's payload that marks its records malicious."""
JOURNAL_FILE = "journal.jsonl"


@dataclass
class MaliciousMark:
    """A record marked malicious: when, by whom, and why."""

    id: str
    time: float
    actor: str
    reason: str = ""


@dataclass
class DerivedRule:
    """A rule whose journal names a malicious record in its provenance.

    Attributes:
        id: the rule's record id.
        sources: the malicious record ids it came from (episodes; a step's mark counts for its episode).
        how: what those records did to it, in journal order: created, edited, upvoted, downvoted.
        text, scope, score, tier: the rule as the bank holds it now (`exists` false: removed since).
    """

    id: str
    sources: list[str] = field(default_factory=list)
    how: list[str] = field(default_factory=list)
    text: str = ""
    scope: str = ""
    score: float | None = None
    tier: str | None = None
    exists: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class MaliciousReport:
    """What `quarantine_malicious` marked, and what the marked records contaminated in the bank.

    Attributes:
        ids: the records quarantined and marked malicious (an episode's steps follow it).
        rules: the rules derived from them (`DerivedRule`), whether quarantined or not.
        synthetic: synthetic episodes made from them: `{"id", "parents", "quarantined"}`.
        rules_quarantined, synthetic_quarantined: what was quarantined (and marked) with them.
    """

    ids: list[str]
    reason: str = ""
    rules: list[DerivedRule] = field(default_factory=list)
    synthetic: list[dict[str, Any]] = field(default_factory=list)
    rules_quarantined: list[str] = field(default_factory=list)
    synthetic_quarantined: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def malicious_marks(entries: Iterable[JournalEntry]) -> dict[str, MaliciousMark]:
    """The records marked malicious by `entries` (effective journal entries, in order).

    Example:
        A `tier` entry `{"tier": "quarantine", "malicious": true}` on `ep:keyroom:r-0001` marks it;
        a later `tier` entry `{"tier": "regular"}` on the same id (`crl memory release`) clears it.
    """
    marks: dict[str, MaliciousMark] = {}
    for e in entries:
        if e.op == "tier":
            if e.payload.get(MALICIOUS) and e.payload.get("tier") == "quarantine":
                for rid in e.ids:
                    marks[rid] = MaliciousMark(rid, e.time, e.actor, str(e.payload.get("reason") or ""))
            elif e.payload.get("tier") != "quarantine":
                for rid in e.ids:
                    marks.pop(rid, None)
        elif e.op == "review" and e.payload.get("decision") == "accept":
            for rid in e.ids:
                marks.pop(rid, None)
    return marks


def owner_episode(record_id: str) -> str | None:
    """The episode record id a record id stands for in provenance: itself for an episode, its
    episode for a step, None for a rule or anything else."""
    try:
        kind, _, _ = parse_record_id(record_id)
    except ValueError:
        return None
    if kind == "episode":
        return record_id
    return episode_of_step(record_id) if kind == "step" else None


def is_marked(record_id: str, marked: Iterable[str] | set[str]) -> bool:
    """Whether `record_id` is marked, or is a step of a marked episode."""
    marked = marked if isinstance(marked, set | frozenset | dict) else set(marked)
    if record_id in marked:
        return True
    return record_id.startswith("st:") and owner_episode(record_id) in marked


def tainted_ids(ids: Iterable[str], marked: Iterable[str]) -> list[str]:
    """The ids among `ids` that are marked (or steps of marked episodes), sorted."""
    marked = set(marked)
    return sorted({i for i in ids if is_marked(i, marked)})


def _rule_sources(entry: JournalEntry) -> tuple[str, list[str], str] | None:
    """(rule id, provenance ids, how) of a rule entry, or None for any other entry."""
    p = entry.payload
    if entry.op == "rule_add":
        record = p.get("record") or {}
        return str(record.get("id") or entry.ids[0]), list(record.get("provenance") or []), "created"
    if entry.op == "rule_edit" and entry.ids:
        return entry.ids[0], list(p.get("provenance") or []), "edited"
    if entry.op == "rule_vote" and entry.ids:
        delta = float(p.get("delta", 0.0))
        return entry.ids[0], list(p.get("provenance") or []), "upvoted" if delta >= 0 else "downvoted"
    return None


def derived_rules(entries: Iterable[JournalEntry], marked: Iterable[str]) -> dict[str, DerivedRule]:
    """Rules whose journal entries name a marked episode (or a marked step's episode) in their
    provenance, by rule id, in journal order (their current state is not filled in)."""
    episodes = {owner_episode(rid) for rid in marked} - {None}
    out: dict[str, DerivedRule] = {}
    for e in entries:
        traced = _rule_sources(e)
        if traced is None:
            continue
        rule_id, provenance, how = traced
        hits = [p for p in provenance if p in episodes]
        if not hits:
            continue
        rule = out.setdefault(rule_id, DerivedRule(rule_id))
        rule.sources = sorted(set(rule.sources) | set(hits))
        rule.how.append(how)
    return out


def synthetic_children(episodes: Iterable[Any], marked: Iterable[str]) -> list[tuple[str, list[str]]]:
    """Synthetic episode records (stitched, relabelled) made from a marked episode: (id, marked parents).

    A synthetic episode's provenance names its parents by episode id; a parent is marked when an
    episode record of that id is.
    """
    wanted: dict[str, str] = {}
    for rid in marked:
        ep = owner_episode(rid)
        if ep is not None:
            wanted[ep.split(":", 2)[2]] = ep
    out = []
    for record in episodes:
        parents = (getattr(record, "provenance", None) or {}).get("parents") or []
        hits = sorted({wanted[p] for p in parents if p in wanted})
        if hits:
            out.append((record.id, hits))
    return out


class _JournalFile:
    """A journal file read as it is: no lock taken, no header written, nothing repaired."""

    def __init__(self, path: Path):
        self.path = path

    read_numbered = Journal.read_numbered


def namespace_journal(memory_dir: str | Path, namespace: str | None) -> Path:
    """Where `namespace`'s journal lives under `memory_dir` (`memory.storage.namespaces`), without
    claiming anything; None means the home's first namespace."""
    memory_dir = Path(memory_dir)
    primary = primary_namespace(memory_dir)
    if namespace is None or namespace == primary or (primary is None and namespace == DEFAULT):
        return memory_dir / JOURNAL_FILE
    return memory_dir / SUBDIR / namespace / JOURNAL_FILE


def read_marks(memory_dir: str | Path, namespace: str | None) -> dict[str, MaliciousMark]:
    """The malicious marks of a namespace's journal (empty when it has none or no journal yet)."""
    path = namespace_journal(memory_dir, namespace)
    if not path.is_file():
        return {}
    state = JournalState()
    state.refresh(_JournalFile(path))  # type: ignore[arg-type]
    return malicious_marks(state.entries)
