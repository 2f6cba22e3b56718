"""The studio's memory side: listing, search, records with their journal, curation and rules,
each a call into the same `ExperienceBank` methods `crl memory` and `crl memory rules` make.

Every write passes `STUDIO_ACTOR`, so `crl memory history ID` shows the change as a human
edit made in the studio. Listings are kept current from the journal (`listings`), so paging,
sorting and filtering a large bank scan it once; until that scan is done, a page is read
straight from the store by `where` filters (`memory.storage.paged`) when its filters allow.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from crl.memory.records import KINDS, AnyRecord, parse_record_id
from crl.memory.storage.paged import PageQuery, Pager, pageable

from .listings import Listings

STUDIO_ACTOR = "human edit (studio)"
SORTS = {"recent": "recency", "value": "value", "use": "use", "utility": "utility", "last-used": "last_used"}
TIERS = ("golden", "regular", "quarantine")
OUTCOMES = ("success", "failure", "unfinished")
SOURCES = ("real", "synthetic", "imported")
MAX_PER_PAGE = 200
STORE_DEPTH = 2000  # deeper pages read too much of the store: they wait for the listing
RECORD_ACTIONS = ("pin", "quarantine", "release", "tag", "untag", "delete")
RULE_ACTIONS = ("pin", "unpin", "delete")


class ConfirmationNeeded(ValueError):
    """A destructive action was asked for without `confirm`."""


@dataclass(frozen=True)
class RecordFilter:
    """What `crl memory ls` filters by (None: no filter on that field)."""

    kind: str = "episode"
    family: str | None = None
    variant: str | None = None
    outcome: str | None = None
    tier: str | None = None
    source: str | None = None
    skill: str | None = None
    tag: str | None = None

    def check(self) -> None:
        """Raise `ValueError` naming the first field with a value the bank does not know."""
        for name, allowed in (("kind", KINDS), ("outcome", OUTCOMES), ("tier", TIERS), ("source", SOURCES)):
            given = getattr(self, name)
            if given is not None and given not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {given!r}")


def record_json(record: AnyRecord, with_trajectory: bool = True) -> dict[str, Any]:
    """A record as JSON (what `crl memory ls/show --json` print); episodes without their trajectory in listings."""
    exclude = None if with_trajectory or record.kind != "episode" else {"trajectory"}
    return record.model_dump(mode="json", exclude=exclude)


def history_rows(items) -> list[dict[str, Any]]:
    """A record's journal entries as `crl memory history --json` prints them (each with a one-line summary)."""
    from crl.agent import render_memory

    return render_memory.history_json(items)


def record_link(record_id: str, namespace: str | None = None) -> str | None:
    """The studio page of a memory record id (None for keys that are not records, e.g. action
    values), in `namespace` when given (none: the studio's default)."""
    try:
        parse_record_id(record_id)
    except ValueError:
        return None
    return f"/memories/{record_id}" + (f"?namespace={namespace}" if namespace else "")


class MemoryView:
    """The bank as the studio reads and curates it (one lock: the bank is used from worker threads)."""

    def __init__(self, bank: Any, max_rule_chars: int):
        self.bank = bank
        self.namespace: str = bank.namespace
        self.max_rule_chars = max_rule_chars
        self.lock = threading.RLock()
        self.listings = Listings(bank, STUDIO_ACTOR, self.lock)
        self.pager = Pager(bank.view)
        self._maps: dict[tuple, tuple[list[AnyRecord], dict[str, Any]]] = {}
        self._warming: threading.Thread | None = None

    # ---- reading -----------------------------------------------------------------------

    def listing(self, flt: RecordFilter, sort: str) -> list[AnyRecord]:
        """Every record matching `flt`, sorted as `crl memory ls --sort` sorts (kept current from the journal)."""
        flt.check()
        if sort not in SORTS:
            raise ValueError(f"sort must be one of {', '.join(SORTS)}, not {sort!r}")
        if not self.listings.ready(flt.kind):
            self.listings.build(flt.kind)
        with self.lock:
            return self.listings.get(flt, SORTS[sort])

    def warm_up(self, kinds: Sequence[str] = ("episode",)) -> threading.Thread:
        """List the bank in the background (a large bank takes seconds); pages are read straight
        from the store until it is done."""

        def scan() -> None:
            for kind in kinds:
                try:
                    self.listings.build(kind)
                except Exception as exc:  # a page that needs the listing asks again and shows the error
                    logging.getLogger(__name__).warning("listing the %s records failed: %s", kind, exc)

        thread = threading.Thread(target=scan, name=f"studio-listing-{self.namespace}", daemon=True)
        thread.start()
        self._warming = thread
        return thread

    def settle(self, timeout_s: float = 10.0) -> None:
        """Wait (up to `timeout_s`) for the background listing, so the bank is not closed under it."""
        if self._warming is not None:
            self._warming.join(timeout_s)

    def bank_map(self, flt: RecordFilter, limit: int, seed: int = 0) -> dict[str, Any]:
        """The PCA map of the records matching `flt` (see `bank_map`), kept until the listing changes."""
        from .bank_map import bank_map

        self.listing(flt, "recent")  # the first listing is built without the lock
        with self.lock:
            records = self.listing(flt, "recent")
            key = (flt, limit, seed)
            cached = self._maps.get(key)
            if cached is not None and cached[0] is records:
                return cached[1]
            data = bank_map(self.bank, records, limit, seed)
            self._maps = {k: v for k, v in self._maps.items() if k[0] != flt or v[0] is records}
            self._maps[key] = (records, data)
            while len(self._maps) > 8:
                self._maps.pop(next(iter(self._maps)))
            return data

    def page(self, flt: RecordFilter, sort: str, page: int, per_page: int) -> dict[str, Any]:
        """One page of a listing: its rows, the total and the page count."""
        if not 1 <= per_page <= MAX_PER_PAGE:
            raise ValueError(f"per_page must be between 1 and {MAX_PER_PAGE}, not {per_page}")
        if page < 1:
            raise ValueError(f"page must be 1 or more, not {page}")
        flt.check()
        if sort not in SORTS:
            raise ValueError(f"sort must be one of {', '.join(SORTS)}, not {sort!r}")
        if (
            not self.listings.ready(flt.kind)
            and page * per_page <= STORE_DEPTH
            and pageable(flt.kind, SORTS[sort], flt.source, flt.skill, flt.tag)
        ):
            with self.lock:
                stamp = self.bank.journal.end()
                shown, total = self.pager.page(self.page_query(flt, sort), page, per_page, stamp)
            listed = "store"
        else:
            records = self.listing(flt, sort)
            total = len(records)
            shown = records[(page - 1) * per_page : page * per_page]
            listed = "listing"
        pages = max(1, -(-total // per_page))
        if page > pages:
            raise ValueError(f"page {page} is past the last page ({pages})")
        return {
            "total": total,
            "page": page,
            "pages": pages,
            "per_page": per_page,
            "listed_from": listed,
            "rows": [record_json(r, with_trajectory=False) for r in shown],
        }

    @staticmethod
    def page_query(flt: RecordFilter, sort: str) -> PageQuery:
        """The store-side query of a filter set and sort (`memory.storage.paged`)."""
        return PageQuery(flt.kind, flt.family, flt.variant, flt.outcome, flt.tier, SORTS[sort])

    def search(
        self, text: str, k: int, family: str | None, kinds: Sequence[str], include_quarantine: bool
    ) -> list[dict[str, Any]]:
        """Semantic search (`crl memory search`): hits with their cosine similarity, best first."""
        if not text.strip():
            raise ValueError("the search text is empty")
        if not 1 <= k <= MAX_PER_PAGE:
            raise ValueError(f"k must be between 1 and {MAX_PER_PAGE}, not {k}")
        for kind in kinds:
            if kind not in ("episode", "step"):
                raise ValueError(f"search kinds are episode and step, not {kind!r}")
        with self.lock:
            hits = self.bank.search(text, k=k, family=family, kinds=tuple(kinds), include_quarantine=include_quarantine)
        return [{"id": h.id, "similarity": h.similarity, "record": record_json(h.record, False)} for h in hits]

    def record(self, ref: str) -> dict[str, Any]:
        """One record in full (`crl memory show`) with its journal (`crl memory history`)."""
        with self.lock:
            rid = self.bank.resolve(ref)
            record = self.bank.get(rid)
            items = self.bank.history(rid)
        data = {"record": record_json(record), "history": history_rows(items)}
        if record.kind == "step":
            data["episode_link"] = f"/memories/ep:{record.family}:{record.episode_id}"
        if record.kind == "rule":
            data["provenance_links"] = [record_link(p) for p in record.provenance]
        return data

    def history(self, ref: str) -> list[dict[str, Any]]:
        """Every journal entry that touched a record, oldest first."""
        with self.lock:
            return history_rows(self.bank.history(self.bank.resolve(ref)))

    def families(self) -> list[str]:
        """Task families with stored episodes (for the filter form)."""
        with self.lock:
            return self.bank.view.families("episode")

    # ---- curation ----------------------------------------------------------------------

    def curate(
        self, action: str, ids: Sequence[str], tags: Sequence[str] = (), reason: str = "", confirm: bool = False
    ) -> list[str]:
        """Apply one `crl memory` curation command to records; returns the record ids changed.

        Raises:
            ConfirmationNeeded: `delete` without `confirm`.
            ValueError: an unknown action, no ids, or tag actions without tags.
        """
        if action not in RECORD_ACTIONS:
            raise ValueError(f"action must be one of {', '.join(RECORD_ACTIONS)}, not {action!r}")
        if not ids:
            raise ValueError("no record ids given")
        if action in ("tag", "untag") and not tags:
            raise ValueError(f"{action} needs at least one tag")
        with self.lock:
            resolved = self.existing(ids)
            if action == "delete":
                if not confirm:
                    raise ConfirmationNeeded(f"removing {len(resolved)} record(s) cannot be undone: confirm it")
                return self.bank.rm(resolved, reason=reason or "removed in the studio", actor=STUDIO_ACTOR)
            if action in ("tag", "untag"):
                return getattr(self.bank, action)(resolved, list(tags), actor=STUDIO_ACTOR)
            return getattr(self.bank, action)(resolved, actor=STUDIO_ACTOR)

    def existing(self, refs: Sequence[str]) -> list[str]:
        """The record ids of `refs`, each checked to be in the bank (a full id the bank never held is refused).

        Raises:
            RecordNotFoundError: a reference matches no stored record.
        """
        from crl.memory.results import RecordNotFoundError

        resolved = list(dict.fromkeys(self.bank.resolve(r) for r in refs))
        found = self.bank.view.locate(resolved)
        missing = [r for r in resolved if r not in found]
        if missing:
            raise RecordNotFoundError(f"no memory record {', '.join(map(repr, missing[:5]))} (removed or never stored)")
        return resolved

    # ---- rules -------------------------------------------------------------------------

    def rules(self, scope: str | None, include_quarantine: bool) -> list[dict[str, Any]]:
        """Rules of a scope and those for every task, highest score first (`crl memory rules ls`)."""
        with self.lock:
            rules = self.bank.rules(scope, include_quarantine=include_quarantine)
        return [rule_row(r) for r in rules]

    def rule_ids(self) -> set[str]:
        with self.lock:
            return {r.id for r in self.bank.ls("rule")}

    def _rule_id(self, ref: str) -> str:
        if ref not in self.rule_ids():
            raise LookupError(f"no rule {ref!r}; the rules page lists them")
        return ref

    def rule(self, ref: str) -> dict[str, Any]:
        """One rule with its journal and the reflections that touched it (`crl memory rules show`)."""
        from crl.memory.reflection.reflector import LOG_NAME, ReflectionLog

        with self.lock:
            rid = self._rule_id(ref)
            record = self.bank.get(rid)
            items = self.bank.history(rid)
            reflections = ReflectionLog(self.bank.dir / LOG_NAME).about_rule(rid)
        return {
            "rule": rule_row(record),
            "history": history_rows(items),
            "provenance_links": [record_link(p) for p in record.provenance],
            "reflections": [
                {k: e.get(k) for k in ("reflection", "time", "model", "input", "accepted", "rejected")}
                for e in reflections
            ],
        }

    def edit_rule(self, ref: str, text: str) -> dict[str, Any]:
        """Rewrite a rule's text after the same cleaning `crl memory rules edit` applies."""
        from crl.memory.reflection.rule_ops import clean_rule_text

        clean, why = clean_rule_text(text, self.max_rule_chars)
        if clean is None:
            raise ValueError(f"cannot use that text: {why}")
        with self.lock:
            rid = self._rule_id(ref)
            self.bank.edit_rule(rid, clean, actor=STUDIO_ACTOR)
        return {"id": rid, "text": clean}

    def rule_action(self, action: str, ids: Sequence[str], confirm: bool = False) -> list[str]:
        """Pin, unpin or remove rules (`crl memory rules pin/unpin/rm`)."""
        if action not in RULE_ACTIONS:
            raise ValueError(f"action must be one of {', '.join(RULE_ACTIONS)}, not {action!r}")
        if not ids:
            raise ValueError("no rule ids given")
        with self.lock:
            rids = list(dict.fromkeys(self._rule_id(i) for i in ids))
            if action == "delete":
                if not confirm:
                    raise ConfirmationNeeded(f"removing {len(rids)} rule(s) cannot be undone: confirm it")
                self.bank.rm(rids, reason="removed in the studio", actor=STUDIO_ACTOR)
            elif action == "pin":
                self.bank.pin(rids, actor=STUDIO_ACTOR)
            else:
                self.bank.release(rids, actor=STUDIO_ACTOR)
        return rids


def rule_row(r) -> dict[str, Any]:
    """A rule as JSON with its scope label, whether it is pinned and who wrote it."""
    return r.model_dump(mode="json") | {
        "scope_label": r.scope_label,
        "pinned": r.tier == "golden",
        "author": r.model or "a person",
    }
