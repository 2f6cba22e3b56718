"""The studio's JSON API (`/api/...`): what the pages' scripts call, and what a script may call.

Bad input is answered with a 4xx and `{"error": "..."}`: 400 for a value the bank refuses or a
query parameter the endpoint does not know, 404 for an unknown id, 422 for a parameter of the
wrong type or out of range (an oversize page among them).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from . import adapters_view, runs_view
from .bank_map import COLOURS, MAX_POINTS
from .memory_view import MAX_PER_PAGE, MemoryView, RecordFilter
from .studio import Studio

MAX_IDS = 1000
Kind = Literal["episode", "step", "rule"]
SortQ = Literal["recent", "value", "use", "utility", "last-used"]
FILTERS = ("kind", "family", "variant", "outcome", "tier", "source", "skill", "tag")


def studio(request: Request) -> Studio:
    """The studio of the app handling `request`."""
    return request.app.state.studio


def memory_view(request: Request, namespace: Annotated[str | None, Query(max_length=64)] = None) -> MemoryView:
    """The memory of the `namespace` query parameter (a namespace of the home; none: the studio's).

    Raises:
        LookupError: the home has no such namespace.
    """
    return studio(request).memory_of(namespace or None)


def known_params(*names: str):
    """A dependency refusing query parameters other than `names` (a misspelt filter is an error, not ignored)."""

    def check(request: Request) -> None:
        unknown = sorted(set(request.query_params) - set(names) - {"token"})
        if unknown:
            raise ValueError(
                f"unknown query parameter(s) {', '.join(unknown)}; this endpoint takes {', '.join(names) or 'none'}"
            )

    return Depends(check)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RecordAction(Strict):
    """A curation command applied to records (`crl memory pin/quarantine/release/tag/untag/rm`) of
    one namespace (none: the studio's), journalled in that namespace's journal."""

    action: Literal["pin", "quarantine", "release", "tag", "untag", "delete"]
    namespace: str | None = Field(None, max_length=64)
    ids: list[str] = Field(min_length=1, max_length=MAX_IDS)
    tags: list[str] = Field(default_factory=list, max_length=20)
    reason: str = Field("", max_length=500)
    confirm: bool = False


class RuleAction(Strict):
    """Pin, unpin or delete rules."""

    action: Literal["pin", "unpin", "delete"]
    namespace: str | None = Field(None, max_length=64)
    ids: list[str] = Field(min_length=1, max_length=MAX_IDS)
    confirm: bool = False


class RuleEdit(Strict):
    text: str = Field(min_length=1, max_length=2000)


class Rollback(Strict):
    base_model: str = Field(min_length=1)


router = APIRouter(prefix="/api")
S = Annotated[Studio, Depends(studio)]
M = Annotated[MemoryView, Depends(memory_view)]


def record_filter(
    kind: Kind = "episode",
    family: str | None = None,
    variant: str | None = None,
    outcome: str | None = None,
    tier: str | None = None,
    source: str | None = None,
    skill: str | None = None,
    tag: str | None = None,
) -> RecordFilter:
    """The browser's filters as the bank's `ls` takes them (an empty value, as a form sends it, is no filter).

    Raises:
        ValueError: an outcome, tier or source the bank does not know.
    """
    flt = RecordFilter(
        kind, family or None, variant or None, outcome or None, tier or None, source or None, skill or None, tag or None
    )
    flt.check()
    return flt


@router.get("/status", dependencies=[known_params()])
def status(s: S) -> dict[str, Any]:
    """Where the memory is, whether the studio holds its lock, and the bank's counts."""
    from dataclasses import asdict

    with s.memory.lock:
        stats = asdict(s.bank.stats())
    return s.about() | {"stats": stats}


# ---- runs --------------------------------------------------------------------------------


@router.get("/runs", dependencies=[known_params()])
def runs(s: S) -> list[dict[str, Any]]:
    """Every run: task, model/adapter, policy, episodes, success with its 95% interval."""
    return runs_view.runs(s.stores)


@router.get("/runs/{run_id}", dependencies=[known_params()])
def run(run_id: str, s: S) -> dict[str, Any]:
    """A run with its episodes and learning curve."""
    return runs_view.run_detail(s.stores, run_id)


@router.get("/runs/{run_id}/progress", dependencies=[known_params()])
def run_progress(run_id: str, s: S) -> dict[str, Any]:
    """A run's progress now, read from its episode log (poll it while the run is running)."""
    return runs_view.progress(s.stores, run_id)


@router.get("/runs/{run_id}/episodes/{number}", dependencies=[known_params()])
def episode(run_id: str, number: int, s: S) -> dict[str, Any]:
    """An episode step by step, with what memory offered at each step and why (`crl explain`)."""
    return runs_view.episode_detail(s.stores, run_id, number, s.bank.namespace)


@router.get("/compare", dependencies=[known_params("run", "all_pairs")])
def compare(
    s: S,
    run: Annotated[list[str], Query(max_length=128)] = [],  # noqa: B006 (FastAPI copies defaults)
    all_pairs: bool = False,
) -> dict[str, Any]:
    """Runs played on the same seeds, seed by seed (`crl compare`): `?run=A&run=B[&all_pairs=true]`."""
    return runs_view.compare(s.stores, run, all_pairs)


@router.get("/experiments", dependencies=[known_params()])
def experiments(s: S) -> list[dict[str, str]]:
    """The results folders `crl experiment` wrote under the studio's results folders."""
    return [{"name": n, "path": str(p)} for n, p in runs_view.experiment_folders(s.results).items()]


@router.get("/experiments/{name:path}", dependencies=[known_params()])
def experiment(name: str, s: S) -> dict[str, Any]:
    """One experiment's curves per arm (pooled success with 95% intervals) and the arms' pairwise tests."""
    return runs_view.experiment(s.results, name)


# ---- memory ------------------------------------------------------------------------------


@router.get("/namespaces", dependencies=[known_params()])
def namespaces(s: S) -> dict[str, Any]:
    """The home's memory namespaces (the browser's namespace filter) and other homes' on the server."""
    return s.namespaces()


@router.get("/memories", dependencies=[known_params(*FILTERS, "namespace", "sort", "page", "per_page")])
def memories(
    m: M,
    flt: Annotated[RecordFilter, Depends(record_filter)],
    sort: SortQ = "recent",
    page: Annotated[int, Query(ge=1)] = 1,
    per_page: Annotated[int, Query(ge=1, le=MAX_PER_PAGE)] = 50,
) -> dict[str, Any]:
    """One page of records of a namespace matching the filters (`crl memory ls`), sorted."""
    return m.page(flt, sort, page, per_page) | {"namespace": m.namespace}


@router.get("/search", dependencies=[known_params("q", "k", "family", "kind", "include_quarantine", "namespace")])
def search(
    m: M,
    q: Annotated[str, Query(min_length=1, max_length=2000)],
    k: Annotated[int, Query(ge=1, le=MAX_PER_PAGE)] = 20,
    family: str | None = None,
    kind: Literal["all", "episode", "step"] = "all",
    include_quarantine: bool = False,
) -> list[dict[str, Any]]:
    """Semantic search over episodes and steps (`crl memory search`), best first."""
    kinds = ("episode", "step") if kind == "all" else (kind,)
    return m.search(q, k, family or None, kinds, include_quarantine)


@router.get("/memories/{record_id}", dependencies=[known_params("namespace")])
def memory(record_id: str, m: M) -> dict[str, Any]:
    """One record in full with its journal."""
    return m.record(record_id)


@router.get("/memories/{record_id}/history", dependencies=[known_params("namespace")])
def memory_history(record_id: str, m: M) -> list[dict[str, Any]]:
    """Every change to a record (`crl memory history`)."""
    return m.history(record_id)


@router.post("/memories/actions", dependencies=[known_params()])
def memory_action(body: Annotated[RecordAction, Body()], s: S) -> dict[str, Any]:
    """Pin, quarantine, release, tag, untag or delete records of a namespace (delete needs `confirm`)."""
    m = s.memory_of(body.namespace)
    ids = m.curate(body.action, body.ids, body.tags, body.reason, body.confirm)
    return {"action": body.action, "namespace": m.namespace, "ids": ids}


@router.get("/map", dependencies=[known_params(*FILTERS, "namespace", "color", "limit", "seed")])
def memory_map(
    m: M,
    flt: Annotated[RecordFilter, Depends(record_filter)],
    color: Literal[COLOURS] = "outcome",  # type: ignore[valid-type]
    limit: Annotated[int, Query(ge=1, le=MAX_POINTS)] = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """The filtered records projected to 2-D by PCA of their stored embeddings (sampled above `limit`)."""
    return m.bank_map(flt, limit, seed) | {"color": color, "namespace": m.namespace}


# ---- rules -------------------------------------------------------------------------------


@router.get("/rules", dependencies=[known_params("scope", "include_quarantine", "namespace")])
def rules(m: M, scope: str | None = None, include_quarantine: bool = False) -> list[dict[str, Any]]:
    """Rules of a scope (and those for every task), highest score first."""
    return m.rules(scope or None, include_quarantine)


@router.get("/rules/{rule_id}", dependencies=[known_params("namespace")])
def rule(rule_id: str, m: M) -> dict[str, Any]:
    """One rule with its journal and reflections."""
    return m.rule(rule_id)


@router.post("/rules/{rule_id}/edit", dependencies=[known_params("namespace")])
def rule_edit(rule_id: str, body: Annotated[RuleEdit, Body()], m: M) -> dict[str, Any]:
    """Rewrite a rule's text (cleaned as `crl memory rules edit` cleans it)."""
    return m.edit_rule(rule_id, body.text)


@router.post("/rules/actions", dependencies=[known_params()])
def rule_action(body: Annotated[RuleAction, Body()], s: S) -> dict[str, Any]:
    """Pin, unpin or delete rules of a namespace (delete needs `confirm`)."""
    m = s.memory_of(body.namespace)
    return {"action": body.action, "ids": m.rule_action(body.action, body.ids, body.confirm)}


# ---- adapters ----------------------------------------------------------------------------


@router.get("/adapters", dependencies=[known_params()])
def adapters(s: S) -> dict[str, Any]:
    """Adapters with lineage and their last gate decision, and the promotion log."""
    return adapters_view.adapters(s.registry, s.quarantined(), s.taints())


@router.get("/adapters/{adapter_id}", dependencies=[known_params()])
def adapter(adapter_id: str, s: S) -> dict[str, Any]:
    """An adapter's lineage, metrics and every gate decision with its p-value."""
    return adapters_view.adapter(s.registry, adapter_id, s.taints())


@router.post("/adapters/{adapter_id}/promote", dependencies=[known_params()])
def adapter_promote(adapter_id: str, s: S) -> dict[str, Any]:
    """Promote an adapter by hand (no gate; recorded as a manual promotion made in the studio)."""
    return adapters_view.promote(s.registry, adapter_id)


@router.post("/adapters/rollback", dependencies=[known_params()])
def adapter_rollback(body: Annotated[Rollback, Body()], s: S) -> dict[str, Any]:
    """Restore the adapter promoted before the current one."""
    return adapters_view.rollback(s.registry, body.base_model)
