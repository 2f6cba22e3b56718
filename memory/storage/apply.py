"""Applying journal entries to the Chroma view: what each op means for the records.

Every apply is a deterministic function of the view and the entry (times come from the
entry, never the clock), so replaying the journal in order always produces the same view.
With `check_applied`, records whose `jseq` shows they already saw the entry are skipped,
which makes replaying a half-applied entry after a crash safe for non-idempotent ops
(credit, decay, vote).

An entry that cannot be applied (a name Chroma refuses, a payload that does not parse, an
import file line an older crl accepted) raises `EntrySkipped` naming the journal line and the
reason; the keeper reports it and goes on, so one bad entry never stops the whole bank.
Imported records are marked untrusted here (quarantine, review pending, unverified) and never
replace a record this bank made from a run or a synthesis.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from crl.memory import tags
from crl.memory.errors import BankError
from crl.memory.ingest import EpisodeTags, build_records, episode_as_of
from crl.memory.records import (
    AnyRecord,
    EpisodeRecord,
    RuleRecord,
    StepRecord,
    episode_record_id,
    family_problem,
    step_record_id,
    utility_of,
)
from crl.memory.storage.episode_log import read_episodes
from crl.memory.storage.journal import JournalEntry
from crl.memory.storage.store import ChromaView, Located, bucket_of
from crl.memory.storage.transfer import ImportValidationError, migrate_record, read_import
from crl.memory.trajectory import Episode

# What a bad entry raises while it is applied; anything else (a server gone away) is not a
# property of the entry and must stop the replay, or the watermark would pass an unapplied entry.
_BAD_ENTRY = (KeyError, TypeError, ValueError, IndexError, AttributeError, ImportValidationError, FileNotFoundError)


class EntrySkipped(BankError, RuntimeError):
    """A journal entry that cannot be applied; replay reports it (journal line and reason) and goes on."""


class MissingContentError(EntrySkipped):
    """An ingest entry refers to a run log (or episode in it) that is gone."""


def where(entry: JournalEntry) -> str:
    """`journal line N (op)`: how a warning names an entry."""
    line = f"line {entry.line}" if entry.line > 0 else f"byte {entry.seq}"
    return f"journal {line} ({entry.op})"


def _chroma_refusal() -> tuple[type[BaseException], ...]:
    try:
        from chromadb.errors import InvalidArgumentError
    except ImportError:
        return ()
    return (InvalidArgumentError,)


def as_imported(record: AnyRecord, file: str) -> AnyRecord:
    """An imported record as the bank holds it: untrusted until a curator accepts it.

    Whatever the file claims, it is unverified, in quarantine and pending review.
    """
    return record.model_copy(
        update={
            "imported_from": file,
            "verified": False,
            "verified_by": None,
            "tier": "quarantine",
            "review": "pending",
        }
    )


def made_here(record: AnyRecord) -> bool:
    """A record this bank made itself (from a run log, a synthesis, a rule written here)."""
    return record.imported_from is None


def _key(record_id: str, text: str) -> tuple[str, str]:
    return record_id, hashlib.sha1(text.encode()).hexdigest()


class VectorCache:
    """Embeddings by (record id, text hash), e.g. kept from the view a rebuild replaces."""

    def __init__(self) -> None:
        self._vectors: dict[tuple[str, str], np.ndarray] = {}

    def add(self, record: AnyRecord, vector: np.ndarray) -> None:
        self._vectors[_key(record.id, record.text)] = vector

    def get(self, record: AnyRecord) -> np.ndarray | None:
        return self._vectors.get(_key(record.id, record.text))

    def __len__(self) -> int:
        return len(self._vectors)


class ContentSource:
    """Finds the episode an ingest entry is about: inline in the entry, or in its run log."""

    def __init__(self, runs_dir: Path | None, memory_dir: Path, cache_logs: int = 4):
        self.runs_dir = runs_dir
        self.memory_dir = memory_dir
        self._logs: OrderedDict[Path, dict[str, Episode]] = OrderedDict()
        self._cache_logs = cache_logs

    def log_ref(self, episode: Episode) -> str | None:
        """The run log (relative to the runs dir) an episode of a real run can be read back from."""
        if self.runs_dir is None or episode.source != "real":
            return None
        rel = f"{episode.run_id}/episodes.jsonl"
        return rel if (self.runs_dir / rel).exists() else None

    def _log(self, path: Path) -> dict[str, Episode]:
        if path in self._logs:
            self._logs.move_to_end(path)
            return self._logs[path]
        episodes = {e.episode_id: e for e in read_episodes(path)}
        self._logs[path] = episodes
        while len(self._logs) > self._cache_logs:
            self._logs.popitem(last=False)
        return episodes

    def forget(self, path: Path) -> None:
        """Drop a cached log (it grew)."""
        self._logs.pop(path, None)

    def episode(self, entry: JournalEntry) -> Episode:
        p = entry.payload
        if "episode" in p:
            return Episode.from_dict(p["episode"])
        if self.runs_dir is None:
            raise MissingContentError(f"episode {p['episode_id']}: no runs directory to read {p['log']} from")
        path = self.runs_dir / p["log"]
        if not path.exists():
            raise MissingContentError(f"episode {p['episode_id']}: run log {path} is missing")
        ep = self._log(path).get(p["episode_id"])
        if ep is None or len(ep.steps) < int(p["n_steps"]) or (p["finished"] and not ep.finished):
            self.forget(path)  # the log grew since it was cached
            ep = self._log(path).get(p["episode_id"])
        if ep is None:
            raise MissingContentError(f"episode {p['episode_id']} is not in {path}")
        return ep


def merge_curation(new: AnyRecord, old: AnyRecord) -> AnyRecord:
    """`new` (rebuilt from content) keeping what curation and use did to `old`."""
    keep: dict[str, Any] = {
        "tier": old.tier,
        "tags": old.tags,
        "use_count": old.use_count,
        "use_successes": old.use_successes,
        "utility": old.utility,
        "last_used_at": old.last_used_at,
        "credit_actor": old.credit_actor,
        "credit_uses": old.credit_uses,
        "credit_wins": old.credit_wins,
        "value_prior": old.value_prior,
    }
    if old.use_count > 0:
        keep["value"] = old.value
    return new.model_copy(update=keep)


class Materializer:
    """Applies journal entries to a `ChromaView`."""

    def __init__(
        self,
        view: ChromaView,
        embedder: Any,
        content: ContentSource,
        unneeded_of: Callable[[Episode], set[int]] | None = None,
    ):
        """`unneeded_of` (`memory.minimal_credit`): a won real episode's steps its win did not need."""
        self.view = view
        self.embedder = embedder
        self.content = content
        self.unneeded_of = unneeded_of
        self.cache = VectorCache()
        self.warnings: list[str] = []

    def vectors(self, records: list[AnyRecord], known: dict[str, np.ndarray] | None = None) -> np.ndarray:
        """Embeddings of records: from `known` (by id), the cache, else embedded now in one batch."""
        known = known or {}
        out: list[np.ndarray | None] = []
        missing: list[int] = []
        for i, r in enumerate(records):
            v = known.get(r.id)
            if v is None:
                v = self.cache.get(r)
            out.append(v)
            if v is None:
                missing.append(i)
        if missing:
            fresh = self.embedder.embed([records[i].text for i in missing])
            for i, v in zip(missing, fresh):
                out[i] = v
        if not out:
            return np.zeros((0, 1), dtype=np.float32)
        return np.stack(out).astype(np.float32)

    def apply(
        self,
        entry: JournalEntry,
        check_applied: bool,
        episode: Episode | None = None,
        vectors: dict[str, np.ndarray] | None = None,
    ) -> None:
        """Apply one entry. `episode` and `vectors` spare an ingest re-reading and re-embedding."""
        if entry.dropped:
            return
        handler = getattr(self, f"_{entry.op}", None)
        if handler is None:
            raise EntrySkipped(f"{where(entry)}: skipped, this crl cannot apply the op {entry.op!r}")
        try:
            if entry.op == "ingest":
                self._ingest(entry, check_applied, episode, vectors)
            else:
                handler(entry, check_applied)
        except EntrySkipped:
            raise
        except _BAD_ENTRY + _chroma_refusal() as e:
            raise EntrySkipped(f"{where(entry)}: skipped, it cannot be applied ({type(e).__name__}: {e})") from e

    # ---- ops ----------------------------------------------------------------------------

    def _ingest(
        self,
        entry: JournalEntry,
        check_applied: bool,
        episode: Episode | None,
        vectors: dict[str, np.ndarray] | None,
    ) -> None:
        p = entry.payload
        problem = family_problem(p["family"])
        if problem:
            raise EntrySkipped(f"{where(entry)}: skipped episode {p.get('episode_id')!r}: {problem}")
        ep = episode if episode is not None else self.content.episode(entry)
        ep = self._with_outcome(entry, ep)
        ep = episode_as_of(ep, int(p["n_steps"]), bool(p["finished"]))
        t = EpisodeTags(list(p["novelty"]), list(p["step_values"]), float(p["value"]))
        won = ep.finished and bool(ep.success) and ep.source == "real"
        unneeded = self.unneeded_of(ep) if self.unneeded_of is not None and won else set()
        ep_rec, steps = build_records(ep, t, int(p["history_steps"]), now=entry.time, unneeded=unneeded)
        ep_rec = ep_rec.model_copy(update={"source": p.get("source", ep_rec.source)})
        steps = [s.model_copy(update={"source": ep_rec.source}) for s in steps]
        located: dict[str, Located] = {}
        if p.get("prior") or p.get("replaces_import") or check_applied:
            whole = p.get("prior") or p.get("replaces_import")
            wanted = [ep_rec.id] + ([s.id for s in steps] if whole else [])
            located = self.view.locate(wanted)
            old_ep = located.get(ep_rec.id)
            if check_applied and old_ep is not None and old_ep.jseq >= entry.seq:
                return
        mergeable = {rid: loc for rid, loc in located.items() if made_here(loc.record)}  # a run replaces an import
        old_episode = mergeable.get(ep_rec.id)
        if old_episode is not None:
            ep_rec = merge_curation(ep_rec, old_episode.record)
            # steps new to a pinned or quarantined episode join it in its tier
            steps = [s.model_copy(update={"tier": ep_rec.tier}) for s in steps]
        records: list[AnyRecord] = [
            merge_curation(s, mergeable[s.id].record) if s.id in mergeable else s for s in steps
        ]
        # steps first, the episode last: an episode record with this jseq means all its steps landed
        self.view.put(records, self.vectors(records, vectors), entry.seq)
        self.view.put([ep_rec], self.vectors([ep_rec], vectors), entry.seq)
        self._drop_stale(records + [ep_rec], located)

    def _with_outcome(self, entry: JournalEntry, ep: Episode) -> Episode:
        """The episode with the outcome the entry journalled when its log lost the end event (a torn
        tail cut off after the episode was stored as finished)."""
        p = entry.payload
        if not p["finished"] or ep.finished:
            return ep
        outcome = p.get("outcome")
        if not outcome:
            self.warnings.append(
                f"{where(entry)}: episode {p['episode_id']} was stored finished but its run log lost the end; "
                "kept unfinished until the log has it again"
            )
            return ep
        ep = Episode.from_dict(ep.to_dict())
        for k, v in outcome.items():
            if k in Episode.__dataclass_fields__ and k != "steps":
                setattr(ep, k, v)
        return ep

    def _import(self, entry: JournalEntry, check_applied: bool) -> None:
        file = entry.payload["file"]
        path = self.content.memory_dir / file
        bad: list[tuple[int, str]] = []
        records = read_import(path, max_line_bytes=1 << 62, max_field_chars=1 << 62, check=False, skipped=bad)
        for n, msg in bad[:5]:
            self.warnings.append(f"{where(entry)}: skipped line {n} of {file}: {msg}")
        if len(bad) > 5:
            self.warnings.append(f"{where(entry)}: skipped {len(bad) - 5} more line(s) of {file}")
        records = self.importable(records)
        records = [as_imported(r, file) for r in records]
        if check_applied:
            located = self.view.locate([r.id for r in records])
            records = [r for r in records if r.id not in located or located[r.id].jseq < entry.seq]
        located = self.view.locate([r.id for r in records]) if records else {}
        chunk = 4096
        for start in range(0, len(records), chunk):
            part = records[start : start + chunk]
            self.view.put(part, self.vectors(part), entry.seq)
        self._drop_stale(records, located)

    def importable(self, records: list[AnyRecord]) -> list[AnyRecord]:
        """Records an import may write: none whose id (or whose episode's id) the bank made itself."""
        located = self.view.locate([r.id for r in records])
        ours = {rid for rid, loc in located.items() if made_here(loc.record)}
        episode_ids = {
            episode_record_id(r.family, r.episode_id)
            for r in records
            if isinstance(r, StepRecord) and episode_record_id(r.family, r.episode_id) not in located
        }
        located_eps = self.view.locate(sorted(episode_ids)) if episode_ids else {}
        ours |= {rid for rid, loc in located_eps.items() if made_here(loc.record)}

        def owner(r: AnyRecord) -> str:
            return episode_record_id(r.family, r.episode_id) if isinstance(r, StepRecord) else r.id

        return [r for r in records if r.id not in ours and owner(r) not in ours]

    def _drop_stale(self, written: list[AnyRecord], located: dict[str, Located]) -> None:
        """Delete the old copies of records that were just written to a different bucket."""
        by_col: dict[str, list[str]] = {}
        for r in written:
            loc = located.get(r.id)
            if loc is not None and loc.collection != self.view.name_of(r.kind, r.family, bucket_of(r)):
                by_col.setdefault(loc.collection, []).append(r.id)
        for name, ids in by_col.items():
            self.view.delete_from(name, ids)

    def _with_steps(self, ids: list[str]) -> dict[str, Located]:
        """Locate records; an episode brings its steps along."""
        found = self.view.locate(ids)
        step_ids = []
        for loc in found.values():
            if isinstance(loc.record, EpisodeRecord):
                step_ids += [
                    step_record_id(loc.record.family, loc.record.episode_id, i) for i in range(loc.record.length)
                ]
        if step_ids:
            found.update(self.view.locate(step_ids))
        return found

    def _change(self, entry: JournalEntry, located: dict[str, Located], check_applied: bool, update) -> None:
        changes = []
        for loc in located.values():
            if check_applied and loc.jseq >= entry.seq:
                continue
            new = update(loc.record)
            if new is not None:
                changes.append((loc, new.model_copy(update={"updated_at": entry.time})))
        self.view.update(changes, entry.seq)

    def _tag(self, entry: JournalEntry, check_applied: bool) -> None:
        add = list(entry.payload["tags"])
        self._change(
            entry,
            self.view.locate(entry.ids),
            check_applied,
            lambda r: r.model_copy(update={"tags": sorted(set(r.tags) | set(add))}),
        )

    def _untag(self, entry: JournalEntry, check_applied: bool) -> None:
        drop = set(entry.payload["tags"])
        self._change(
            entry,
            self.view.locate(entry.ids),
            check_applied,
            lambda r: r.model_copy(update={"tags": [t for t in r.tags if t not in drop]}),
        )

    def _tier(self, entry: JournalEntry, check_applied: bool) -> None:
        tier = entry.payload["tier"]
        self._change(entry, self._with_steps(entry.ids), check_applied, lambda r: r.model_copy(update={"tier": tier}))

    def _rm(self, entry: JournalEntry, check_applied: bool) -> None:
        found = self._with_steps(entry.ids)
        self.view.delete(list(found))

    def _credit(self, entry: JournalEntry, check_applied: bool) -> None:
        p = entry.payload
        success = bool(p["success"])
        target = float(p["target"])
        alpha = float(p["alpha"])
        acted = p.get("model_actor")

        def credit(r: AnyRecord) -> AnyRecord:
            uses, wins = r.use_count + 1, r.use_successes + int(success)
            kept_uses = None if r.credit_uses is None else r.credit_uses + 1
            kept_wins = None if r.credit_wins is None else r.credit_wins + int(success)
            prior = r.value if r.value_prior is None and r.use_count == 0 else r.value_prior
            return r.model_copy(
                update={
                    "use_count": uses,
                    "use_successes": wins,
                    "utility": utility_of(
                        uses if kept_uses is None else kept_uses, wins if kept_wins is None else kept_wins
                    ),
                    "value": tags.ema_update(r.value, target, alpha),
                    "last_used_at": entry.time,
                    "credit_actor": acted,
                    "credit_uses": kept_uses,
                    "credit_wins": kept_wins,
                    "value_prior": prior,
                }
            )

        self._change(entry, self.view.locate(entry.ids), check_applied, credit)

    def _decay(self, entry: JournalEntry, check_applied: bool) -> None:
        p = entry.payload
        keep = 1.0 - float(p["decay"])
        current = p["model_actor"]

        def decay(r: AnyRecord) -> AnyRecord | None:
            if r.credit_actor == current:
                return None
            uses, wins = r.effective_uses * keep, r.effective_wins * keep
            prior = tags.NEUTRAL_VALUE if r.value_prior is None else r.value_prior
            return r.model_copy(
                update={
                    "credit_uses": uses,
                    "credit_wins": wins,
                    "utility": utility_of(uses, wins),
                    "value": tags.decay_toward(r.value, prior, keep),
                }
            )

        self._change(entry, self.view.locate(entry.ids), check_applied, decay)

    def _review(self, entry: JournalEntry, check_applied: bool) -> None:
        p = entry.payload
        decision = p["decision"]
        if decision not in ("accept", "reject", "edit"):
            raise ValueError(f"unknown review decision {decision!r}")

        def decide(r: AnyRecord) -> AnyRecord | None:
            if decision == "edit":
                return _edited(r, p.get("set") or {})
            if decision == "reject":
                return r.model_copy(update={"review": "rejected", "tier": "quarantine"})
            update: dict[str, Any] = {"review": "accepted", "tier": p.get("tier", "regular")}
            if not isinstance(r, RuleRecord) and not r.verified:
                update |= {"verified": True, "verified_by": f"curator:{entry.actor}"}
            return r.model_copy(update=update)

        self._change(entry, self._with_steps(entry.ids), check_applied, decide)

    def _rule_add(self, entry: JournalEntry, check_applied: bool) -> None:
        rule = RuleRecord.model_validate(migrate_record(dict(entry.payload["record"])))
        if check_applied:
            loc = self.view.locate([rule.id]).get(rule.id)
            if loc is not None and loc.jseq >= entry.seq:
                return
        self.view.put([rule], self.vectors([rule]), entry.seq)

    def _rule_edit(self, entry: JournalEntry, check_applied: bool) -> None:
        loc = self.view.locate(entry.ids).get(entry.ids[0])
        if loc is None or (check_applied and loc.jseq >= entry.seq):
            return
        p = entry.payload
        rule = _traced(loc.record, p).model_copy(
            update={
                "text": p["text"],
                "score": loc.record.score + float(p.get("delta", 0.0)),
                "updated_at": entry.time,
            }
        )
        self.view.put([rule], self.vectors([rule]), entry.seq)

    def _rule_vote(self, entry: JournalEntry, check_applied: bool) -> None:
        p = entry.payload
        delta = float(p["delta"])
        self._change(
            entry,
            self.view.locate(entry.ids),
            check_applied,
            lambda r: (
                _traced(r, p).model_copy(update={"score": r.score + delta}) if isinstance(r, RuleRecord) else None
            ),
        )


EDITABLE = ("tags", "value")
"""What a review `edit` decision may change: labels and the value label (a rule's text goes
through `rule_edit`, which re-embeds it)."""


def _edited(record: AnyRecord, changes: dict[str, Any]) -> AnyRecord | None:
    update: dict[str, Any] = {}
    if "tags" in changes:
        update["tags"] = sorted({str(t) for t in changes["tags"]})
    if "value" in changes and not isinstance(record, RuleRecord):
        update["value"] = min(1.0, max(0.0, float(changes["value"])))
    return record.model_copy(update=update) if update else None


RULE_TRACE_LIMIT = 50  # provenance and reflection ids kept per rule (the journal keeps them all)


def _traced(rule: AnyRecord, payload: dict[str, Any]) -> AnyRecord:
    """A rule with the episode ids and reflection run of a rule_edit / rule_vote entry added."""
    if not isinstance(rule, RuleRecord):
        return rule
    update: dict[str, Any] = {}
    if payload.get("provenance"):
        update["provenance"] = list(dict.fromkeys(rule.provenance + list(payload["provenance"])))[-RULE_TRACE_LIMIT:]
    if payload.get("reflection"):
        update["reflections"] = list(dict.fromkeys(rule.reflections + [payload["reflection"]]))[-RULE_TRACE_LIMIT:]
    return rule.model_copy(update=update) if update else rule
