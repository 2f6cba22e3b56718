"""The curation half of `ExperienceBank`: tags, tiers, removal, credit and its decay, eviction,
export, import, rebuild and rules. Each operation is one journal entry, applied at once.

A mixin: it uses the bank's `view`, `keeper`, `journal`, `config`, `resolve` and `_write`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from crl.memory.actors import credited_under_older_actor
from crl.memory.contamination import (
    MALICIOUS,
    DerivedRule,
    MaliciousReport,
    derived_rules,
    malicious_marks,
    synthetic_children,
)
from crl.memory.curation import EvictionCandidate, plan_eviction
from crl.memory.records import (
    KINDS,
    RULE_SCOPE_ALL,
    AnyRecord,
    EpisodeRecord,
    RuleRecord,
    StepRecord,
    episode_record_id,
    parse_record_id,
    rule_record_id,
)
from crl.memory.results import ImportReport, RebuildReport, parse_time
from crl.memory.storage.outage import ServerUnavailable
from crl.memory.storage.store import BUCKETS, SEARCH_BUCKETS, Hit
from crl.memory.storage.transfer import MAX_REPORTED_ERRORS, ImportValidationError, read_import, write_export


def _rule_trace(delta: float, provenance: Sequence[str], reflection: str | None) -> dict:
    """The optional parts of a rule_edit / rule_vote payload (absent when empty, as in old entries)."""
    out: dict = {}
    if delta:
        out["delta"] = float(delta)
    if provenance:
        out["provenance"] = list(provenance)
    if reflection:
        out["reflection"] = reflection
    return out


def _fill_rule(rule: DerivedRule, found: Any) -> None:
    """Copy a derived rule's current text, scope, score and tier from the bank (when it still holds it)."""
    if found is None:
        return
    record = found.record
    rule.text, rule.scope, rule.score, rule.tier, rule.exists = (
        record.text,
        record.scope_label,
        record.score,
        record.tier,
        True,
    )


def as_list(ids: str | Iterable[str]) -> list[str]:
    """One id or many, as a list."""
    return [ids] if isinstance(ids, str) else list(ids)


class CurationMixin:
    """Curation operations of `ExperienceBank` (see the module docstring)."""

    def tag(self, ids: str | Iterable[str], tags: str | Iterable[str], actor: str | None = None) -> list[str]:
        """Add user labels to records; returns the record ids."""
        return self._label("tag", ids, tags, actor)

    def untag(self, ids: str | Iterable[str], tags: str | Iterable[str], actor: str | None = None) -> list[str]:
        """Remove user labels from records; returns the record ids."""
        return self._label("untag", ids, tags, actor)

    def _label(self, op: str, ids: str | Iterable[str], labels: str | Iterable[str], actor: str | None) -> list[str]:
        labels = as_list(labels)
        for label in labels:
            if not label or "," in label or label.strip() != label:
                raise ValueError(f"tag {label!r} must be non-empty, without commas or surrounding spaces")
        rids = self._resolve_all(ids)
        self._write(op, rids, {"tags": labels}, actor)
        return rids

    def _set_tier(self, ids: str | Iterable[str], tier: str, actor: str | None) -> list[str]:
        rids = self._resolve_all(ids)
        self._write("tier", rids, {"tier": tier}, actor)
        return rids

    def pin(self, ids: str | Iterable[str], actor: str | None = None) -> list[str]:
        """Move records (an episode with its steps) to the golden tier: never evicted."""
        return self._set_tier(ids, "golden", actor)

    def quarantine(self, ids: str | Iterable[str], actor: str | None = None) -> list[str]:
        """Keep records out of retrieval and fine-tuning data (they stay until removed)."""
        return self._set_tier(ids, "quarantine", actor)

    def release(self, ids: str | Iterable[str], actor: str | None = None) -> list[str]:
        """Return records to the regular tier (from golden or quarantine); a malicious mark on them is cleared."""
        return self._set_tier(ids, "regular", actor)

    def quarantine_malicious(
        self,
        ids: str | Iterable[str],
        reason: str = "",
        actor: str | None = None,
        *,
        with_rules: bool = False,
        with_synthetic: bool = False,
    ) -> MaliciousReport:
        """Quarantine records and mark them malicious in the journal (`memory.contamination`), and
        report what they contaminated: the rules whose journal names them in its provenance, and
        the synthetic episodes made from them.

        Args:
            reason: why, kept in the journal with the mark.
            with_rules: quarantine (and mark) the derived rules too, in the same journal lock.
            with_synthetic: quarantine (and mark) the derived synthetic episodes too.

        Returns:
            The marked ids and the derived rules and synthetic episodes, as the bank holds them now.
        """
        rids = self._resolve_all(ids)
        with self.journal.locked():
            self.keeper.catch_up()
            rules = derived_rules(self.state.entries, rids)
            located = self.view.locate(sorted(rules)) if rules else {}
            for rid, rule in rules.items():
                _fill_rule(rule, located.get(rid))
            families = sorted({parse_record_id(rid)[1] for rid in rids if not rid.startswith("ru:")})
            made = (r for r, _ in self.view.scan("episode", families) if r.source == "synthetic") if families else ()
            synthetic = synthetic_children(made, rids)
            derived = f"derived from {', '.join(rids)}"
            entries: list[tuple[str, list[str], dict[str, Any]] | None] = [
                ("tier", rids, {"tier": "quarantine", MALICIOUS: True} | ({"reason": reason} if reason else {}))
            ]
            quarantined_rules = [r.id for r in rules.values() if r.exists] if with_rules else []
            quarantined_synthetic = [sid for sid, _ in synthetic if sid not in rids] if with_synthetic else []
            for extra in (quarantined_rules, quarantined_synthetic):
                if extra:
                    entries.append(("tier", extra, {"tier": "quarantine", MALICIOUS: True, "reason": derived}))
            self.write_once(entries, actor)
            for rid in quarantined_rules:
                rules[rid].tier = "quarantine"
        return MaliciousReport(
            ids=rids,
            reason=reason,
            rules=list(rules.values()),
            synthetic=[
                {"id": sid, "parents": parents, "quarantined": sid in quarantined_synthetic or sid in rids}
                for sid, parents in synthetic
            ],
            rules_quarantined=quarantined_rules,
            synthetic_quarantined=quarantined_synthetic,
        )

    def malicious(self) -> dict[str, Any]:
        """The records marked malicious now (`memory.contamination.malicious_marks`), by id."""
        self.keeper.refresh()
        return malicious_marks(self.state.entries)

    def rm(self, ids: str | Iterable[str], reason: str = "removed by user", actor: str | None = None) -> list[str]:
        """Delete records (an episode with its steps); `sync` will not bring them back."""
        rids = self._resolve_all(ids)
        self._write("rm", rids, {"reason": reason}, actor)
        return rids

    def credit(
        self,
        ids: str | Iterable[str],
        success: bool,
        target: float | None = None,
        actor: str | None = None,
        *,
        model_actor: str | None = None,
    ) -> None:
        """Record that memories were used by an episode that succeeded or not.

        Each record's use count and utility are updated and its value label takes one EMA
        step toward `target` (default 1.0 on success, 0.0 on failure; see `memory.tags`).
        `model_actor` (`memory.actors.actor_key`) is the actor that played the episode: the
        records remember it, so a later promotion can decay what older actors taught.
        """
        self.write_once([self.credit_entry(ids, success, target, model_actor)], actor)

    def credit_entry(
        self,
        ids: str | Iterable[str],
        success: bool,
        target: float | None = None,
        model_actor: str | None = None,
        once: str | None = None,
        **extra: Any,
    ) -> tuple[str, list[str], dict[str, Any]] | None:
        """The (op, ids, payload) of a credit, checked, for `write_once`; None for no ids.

        Args:
            once: a key that makes the entry idempotent: it is not written again while an
                effective entry with the same key is in the journal.
            extra: more payload (e.g. `paired`: what a paired credit compared).
        """
        rids = as_list(ids)
        if not rids:
            return None
        for rid in rids:
            parse_record_id(rid)
        goal = float(success) if target is None else float(target)
        if not 0.0 <= goal <= 1.0:
            raise ValueError(f"target must be within [0, 1], got {goal}")
        payload: dict[str, Any] = {"success": bool(success), "target": goal, "alpha": self.config.value_alpha}
        if model_actor:
            payload["model_actor"] = model_actor
        if once:
            payload["once"] = once
        return "credit", rids, payload | extra

    def decay_credit(
        self, change: str, model_actor: str, decay: float | None = None, actor: str | None = None
    ) -> tuple[list[str], bool]:
        """Decay credit learned under older actors of `model_actor`'s base model, once per `change`.

        Every record credited last under another actor of the same base model (or under an
        unknown one) keeps `1 - decay` of its counted uses and wins, and its value label moves
        that share back toward its label before credit (`memory.tags.decay_toward`). One
        `decay` journal entry lists them, so `crl memory history ID` shows it.

        Args:
            change: what changed the actor, e.g. a promotion's key; a second call with the same
                key (while its entry stands) does nothing.
            model_actor: the actor now playing (`memory.actors.actor_key`).
            decay: the share forgotten (default `memory.actor_decay`).

        Returns:
            The ids decayed, and whether `change` had already been applied.
        """
        share = self.config.actor_decay if decay is None else float(decay)
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"decay must be within [0, 1], got {share}")
        once = f"decay:{change}"
        with self.journal.locked():
            self.keeper.catch_up()
            if once in self._once_keys():
                return [], True
            ids = sorted(
                record.id
                for kind in KINDS
                for record, _ in self.view.scan(kind)
                if credited_under_older_actor(record, model_actor)
            )
            payload = {"decay": share, "model_actor": model_actor, "change": change, "once": once}
            self.keeper.commit([self._entry("decay", ids, payload, actor)])
        return ids, False

    def _once_keys(self) -> set[str]:
        """The `once` keys of the effective journal entries (call it holding the journal lock)."""
        return {e.payload["once"] for e in self.state.entries if "once" in e.payload}

    def write_once(self, entries: Sequence[tuple[str, list[str], dict[str, Any]] | None], actor: str | None) -> int:
        """Journal and apply (op, ids, payload) entries under one lock, leaving out None and
        those whose `once` key an effective entry already has; returns how many were written.

        While the memory server is unreachable the entries are only journalled; the first
        catch-up after it answers again applies them (so no credit update is lost)."""
        wanted = [e for e in entries if e is not None]
        if not wanted:
            return 0
        with self.journal.locked():
            reachable = True
            try:
                self.keeper.catch_up()
            except ServerUnavailable as e:
                # journal first: the entries are kept (the journal is a local file) and applied to the
                # view by the next catch-up once the server answers; replay applies them in order
                self.server_failed(e)
                self.keeper.refresh()
                reachable = False
            seen = self._once_keys() if any("once" in p for _, _, p in wanted) else set()
            fresh = []
            for op, ids, payload in wanted:
                key = payload.get("once")
                if key is not None and key in seen:
                    continue
                seen.add(key)
                fresh.append(self._entry(op, ids, payload, actor))
            if fresh and reachable:
                try:
                    self.keeper.commit(fresh)
                except ServerUnavailable as e:
                    self.server_failed(e)  # journalled: the next catch-up applies what is missing
            elif fresh:
                self.journal.append(fresh)
                self.keeper.refresh()
        return len(fresh)

    def plan_eviction(self, family: str | None = None) -> list[EvictionCandidate]:
        """What `evict` would remove now, lowest keep-score first."""
        families = [family] if family else None
        episodes = [r for r, _ in self.view.scan("episode", families, SEARCH_BUCKETS)]
        return plan_eviction(
            episodes,  # type: ignore[arg-type]
            self.config.capacity_per_family,
            time.time(),
            self.config.eviction_weights,
            self.config.recency_half_life_days,
        )

    def evict(
        self, dry_run: bool = False, family: str | None = None, actor: str | None = None
    ) -> list[EvictionCandidate]:
        """Evict by policy (see `memory.curation`) so each family fits its capacity; returns what
        was (or, with `dry_run`, would be) evicted."""
        plan = self.plan_eviction(family)
        if plan and not dry_run:
            self._write("rm", [c.id for c in plan], {"reason": "evicted by policy"}, actor or f"evict ({self.actor})")
        return plan

    def _auto_evict(self, family: str, actor: str | None) -> None:
        if self.view.count("episode", family, SEARCH_BUCKETS) > self.config.capacity_per_family:
            self.evict(family=family, actor=actor)

    def export(
        self,
        path: str | Path,
        family: str | None = None,
        kinds: Sequence[str] = KINDS,
        include_quarantine: bool = True,
    ) -> int:
        """Write this namespace's records to a JSONL file (lossless: `import_file` restores them), each
        labelled with the namespace; returns the count."""
        buckets = BUCKETS if include_quarantine else SEARCH_BUCKETS
        records: list[AnyRecord] = []
        for kind in kinds:
            for record, _ in self.view.scan(
                kind, [family] if family and kind != "rule" else None, buckets, documents=True
            ):
                if kind == "rule" and (
                    (family and record.family != family) or (not include_quarantine and record.tier == "quarantine")
                ):
                    continue
                records.append(record.model_copy(update={"namespace": self.namespace}))
        return write_export(path, records)

    def import_file(
        self, path: str | Path, actor: str | None = None, *, from_namespace: str | None = None
    ) -> ImportReport:
        """Validate a JSONL export and add its records, untrusted: each waits in quarantine, unverified,
        for `review` (the report counts them). A record this bank made itself (from a run log or a
        synthesis) is never replaced (`kept_existing`); earlier imports of the same ids are. Records
        labelled with another namespace are refused (unlabelled ones, older exports, join this one)
        unless that namespace is `from_namespace`: a deliberate copy, relabelled to this namespace.

        Raises:
            ImportValidationError: a line is bad; it lists line numbers, and nothing is written.
        """
        path = Path(path)
        records = read_import(path, self.config.max_import_line_bytes, self.config.max_field_chars)
        source = path
        foreign = sorted({r.namespace for r in records if r.namespace not in (None, self.namespace)})
        if foreign and foreign != [from_namespace]:
            self._refuse_foreign(path, records, foreign)
        if foreign:
            records = [r.model_copy(update={"namespace": self.namespace}) for r in records]
            path = self._relabelled(records)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:24]
        stored = Path("imports") / f"{digest}.jsonl"
        if stored.as_posix() in self.state.dropped_imports:
            raise ValueError(f"{path} was dropped (`crl memory rebuild --drop-import`) and stays dropped")
        (self.dir / "imports").mkdir(exist_ok=True)
        if not (self.dir / stored).exists():
            tmp = self.dir / stored.with_suffix(".tmp")
            shutil.copyfile(path, tmp)
            os.replace(tmp, self.dir / stored)
        with self.journal.locked():
            self.keeper.catch_up()
            taken = {r.id for r in self.keeper.materializer.importable(records)}
            kept = sorted(r.id for r in records if r.id not in taken and not isinstance(r, StepRecord))
            records = [r for r in records if r.id in taken]
            novelty: dict[str, dict[int, float]] = {}
            for r in records:
                if isinstance(r, StepRecord):
                    novelty.setdefault(episode_record_id(r.family, r.episode_id), {})[r.index] = r.novelty
            episodes = {
                r.id: [r.length, r.status != "running", [novelty.get(r.id, {}).get(i, 0.0) for i in range(r.length)]]
                for r in records
                if isinstance(r, EpisodeRecord)
            }
            ids = [r.id for r in records if not isinstance(r, StepRecord)]
            payload = {
                "file": stored.as_posix(),
                "count": len(records),
                "episodes": episodes,
                "skipped": kept,
                "trust": "pending",
            }
            self.keeper.commit([self._entry("import", ids, payload, actor)])
        if path != source:
            path.unlink(missing_ok=True)
        return ImportReport(
            path=str(source),
            stored_as=str(self.dir / stored),
            episodes=len(episodes),
            steps=sum(1 for r in records if isinstance(r, StepRecord)),
            rules=sum(1 for r in records if isinstance(r, RuleRecord)),
            pending_review=len(ids),
            kept_existing=kept,
        )

    def _refuse_foreign(self, path: Path, records: list[AnyRecord], foreign: list[str]) -> None:
        """Refuse an import whose records belong to another namespace, naming their lines."""
        hint = (
            f"an import keeps its namespace: import it with --namespace {foreign[0]}, "
            f"or copy it here with --from-namespace {foreign[0]}"
        )
        lines: list[tuple[int, str]] = []
        wanted = {r.id for r in records if r.namespace in foreign}
        with open(path, "rb") as f:
            for n, raw in enumerate(f, 1):
                try:
                    data = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(data, dict) and data.get("id") in wanted:
                    lines.append(
                        (n, f"record of memory namespace {data.get('namespace')!r}, not {self.namespace!r}; {hint}")
                    )
        raise ImportValidationError(path, lines[:MAX_REPORTED_ERRORS], len(lines))

    def _relabelled(self, records: list[AnyRecord]) -> Path:
        """A temporary export file of `records` (relabelled to this namespace) to import from."""
        (self.dir / "imports").mkdir(parents=True, exist_ok=True)
        tmp = self.dir / "imports" / f"relabelled-{os.getpid()}-{threading.get_ident()}.part"
        write_export(tmp, records)
        return tmp

    def review_queue(self) -> list[AnyRecord]:
        """Records waiting for a curator (imports), oldest first: episodes, rules, and steps whose
        episode is not in the bank (an episode's steps follow its decision)."""
        queue: list[AnyRecord] = []
        episodes = set()
        for kind in KINDS:
            for record, _ in self.view.scan(kind, None, ("q",)):
                if record.review != "pending":
                    continue
                if isinstance(record, StepRecord):
                    owner = episode_record_id(record.family, record.episode_id)
                    if owner in episodes or self.view.locate([owner]):
                        continue
                elif isinstance(record, EpisodeRecord):
                    episodes.add(record.id)
                queue.append(record)
        queue.sort(key=lambda r: (r.created_at, r.id))
        return queue

    def review(
        self,
        ids: str | Iterable[str],
        decision: str,
        actor: str | None = None,
        *,
        tier: str = "regular",
        tags: Sequence[str] | None = None,
        value: float | None = None,
        text: str | None = None,
        note: str | None = None,
    ) -> list[str]:
        """A curator's decision on records (an episode with its steps), journalled as a `review` entry.

        Args:
            decision: `accept` (out of quarantine into `tier`; the curator vouches for the outcome,
                so it counts as verified, `verified_by` 'curator:ACTOR'), `reject` (stays in
                quarantine, marked rejected, out of the queue) or `edit` (change `tags`, `value`,
                or a rule's `text`; the record stays in the queue).
            note: why, kept in the journal.

        Returns:
            The record ids decided on.
        """
        if decision not in ("accept", "reject", "edit"):
            raise ValueError(f"a review decision is accept, reject or edit, not {decision!r}")
        if tier not in ("regular", "golden"):
            raise ValueError(f"an accepted record goes to the regular or golden tier, not {tier!r}")
        rids = self._resolve_all(ids)
        payload: dict[str, Any] = {"decision": decision}
        if note:
            payload["note"] = note
        entries: list[tuple[str, list[str], dict[str, Any]] | None] = []
        if decision == "accept":
            payload["tier"] = tier
        elif decision == "edit":
            changes: dict[str, Any] = {}
            if tags is not None:
                for label in tags:
                    if not label or "," in label or label.strip() != label:
                        raise ValueError(f"tag {label!r} must be non-empty, without commas or surrounding spaces")
                changes["tags"] = list(tags)
            if value is not None:
                if not 0.0 <= float(value) <= 1.0:
                    raise ValueError(f"value must be within [0, 1], got {value}")
                changes["value"] = float(value)
            if text is not None:
                rules = [rid for rid in rids if parse_record_id(rid)[0] == "rule"]
                if not text.strip() or not rules:
                    raise ValueError("--text edits a rule's text: give a rule id and non-empty text")
                entries += [("rule_edit", [rid], {"text": text}) for rid in rules]
            if not changes and text is None:
                raise ValueError("an edit needs --tag, --value or --text")
            payload["set"] = changes
        entries.insert(0, ("review", rids, payload))
        self.write_once(entries, actor)
        return rids

    def rebuild(
        self,
        as_of: float | str | datetime | None = None,
        actor: str | None = None,
        *,
        drop_runs: Sequence[str] = (),
        drop_imports: Sequence[str] = (),
    ) -> RebuildReport:
        """Recreate the view from the run logs and the journal, now or as of a past moment.

        With `as_of`, a `rollback` entry is journalled first: every change made after that
        time is cancelled (and stays cancelled), and episodes ingested after it are not
        ingested again by `sync`. Embeddings of unchanged records are reused.

        Args:
            drop_runs: run ids whose every trace is cancelled for good (a `drop` entry each): the
                episodes it stored, the credit, rules and votes its process wrote; `sync` never
                ingests its episodes again.
            drop_imports: imports to cancel for good, each a file given to `import_file`, its stored
                name (`imports/<digest>.jsonl`) or digest.

        Raises:
            ValueError: a run or import to drop is not in the journal.
        """
        when = None if as_of is None else parse_time(as_of)
        with self.journal.locked():
            self.state.refresh(self.journal)
            drops = [{"run_id": self._journalled_run(r)} for r in drop_runs]
            drops += [{"import": self._journalled_import(f)} for f in drop_imports]
            before = len(self.state.dropped)
            entries = [self._entry("drop", [], d, actor) for d in drops]
            if when is not None:
                entries.append(self._entry("rollback", [], {"as_of": when}, actor))
            if entries:
                self.journal.append(entries)
                self.state.refresh(self.journal)
            report = self.keeper.rebuild_view(reuse_vectors=True)
        report.as_of = when
        report.dropped = len(self.state.dropped) - before
        return report

    def _journalled_run(self, run_id: str) -> str:
        entries = self.state.entries + self.state.dropped
        if any(e.actor == f"run:{run_id}" or e.payload.get("run_id") == run_id for e in entries):
            return run_id
        raise ValueError(f"run {run_id!r} left nothing in this memory's journal (see `crl runs`)")

    def _journalled_import(self, ref: str) -> str:
        files = {e.payload["file"] for e in self.state.entries + self.state.dropped if e.op == "import"}
        wanted = {ref, f"imports/{ref}", f"imports/{ref}.jsonl"}
        if Path(ref).is_file():
            wanted.add(f"imports/{hashlib.sha256(Path(ref).read_bytes()).hexdigest()[:24]}.jsonl")
        found = sorted(files & wanted)
        if not found:
            raise ValueError(
                f"no import {ref!r} in this memory's journal: give the imported file or imports/DIGEST.jsonl"
            )
        return found[0]

    # rules

    def add_rule(
        self,
        text: str,
        scope: str = RULE_SCOPE_ALL,
        provenance: Sequence[str] = (),
        score: float = 1.0,
        actor: str | None = None,
        *,
        variant: str | None = None,
        seed: int | None = None,
        model: str = "",
        reflection: str | None = None,
        pending_review: bool = False,
    ) -> str:
        """Store a rule (an insight for a task family, or 'all'); returns its id.

        Args:
            variant, seed: limit the rule to one task variant (and one game of it).
            model: the model that wrote it (empty for a person).
            reflection: the reflection run that wrote it.
            pending_review: untrusted (e.g. added by someone who is not a curator): it waits in
                quarantine for `review`, out of prompts, until accepted.
        """
        if not text.strip():
            raise ValueError("a rule needs text")
        now = time.time()
        rule = RuleRecord(
            id=rule_record_id(scope, text, variant, seed),
            text=text,
            scope=scope,
            score=score,
            provenance=list(provenance),
            variant=variant,
            seed=seed,
            model=model,
            reflections=[reflection] if reflection else [],
            created_at=now,
            updated_at=now,
            **({"tier": "quarantine", "review": "pending"} if pending_review else {}),
        )
        self._write("rule_add", [rule.id], {"record": rule.model_dump(mode="json")}, actor)
        return rule.id

    def edit_rule(
        self,
        rule_id: str,
        text: str,
        actor: str | None = None,
        *,
        delta: float = 0.0,
        provenance: Sequence[str] = (),
        reflection: str | None = None,
    ) -> None:
        """Replace a rule's text (its id stays); `delta` is added to its score in the same entry
        (a reflector's EDIT counts as a vote), `provenance` and `reflection` are added to its own."""
        if not text.strip():
            raise ValueError("a rule needs text")
        payload: dict = {"text": text}
        payload.update(_rule_trace(delta, provenance, reflection))
        self._write("rule_edit", [self.resolve(rule_id)], payload, actor)

    def vote_rule(
        self,
        rule_id: str,
        delta: float,
        actor: str | None = None,
        *,
        provenance: Sequence[str] = (),
        reflection: str | None = None,
        reason: str | None = None,
    ) -> None:
        """Add `delta` to a rule's score (UPVOTE +1, DOWNVOTE -1); `reason` (e.g. the operation)
        is kept in the journal, `provenance` and `reflection` are added to the rule's own."""
        payload: dict = {"delta": float(delta)}
        payload.update(_rule_trace(0.0, provenance, reflection))
        if reason:
            payload["reason"] = reason
        self._write("rule_vote", [self.resolve(rule_id)], payload, actor)

    def rules(self, scope: str | None = None, include_quarantine: bool = False) -> list[RuleRecord]:
        """Rules of a scope (and those for 'all'), highest score first."""
        out = [
            r
            for r, _ in self.view.scan("rule")
            if (scope is None or r.family in (scope, RULE_SCOPE_ALL)) and (include_quarantine or r.tier != "quarantine")
        ]
        out.sort(key=lambda r: (-r.score, r.id))
        return out  # type: ignore[return-value]

    def query_rules(self, texts: Sequence[str], scope: str | None = None, k: int = 5) -> list[list[Hit]]:
        """The k rules nearest to each text (exact search: rules are few)."""
        rules = [
            (r, v)
            for r, v in self.view.scan("rule", embeddings=True)
            if r.tier != "quarantine" and (scope is None or r.family in (scope, RULE_SCOPE_ALL))
        ]
        if not rules or not texts:
            return [[] for _ in texts]
        matrix = np.stack([v for _, v in rules])
        sims = self.embed(texts) @ matrix.T
        out = []
        for row in sims:
            order = np.argsort(-row, kind="stable")[:k]
            out.append([Hit(rules[i][0].id, float(row[i]), rules[i][0]) for i in order])
        return out
