"""The studio's HTML pages: Jinja2 templates rendered on the server from the same view functions
the API returns, with small scripts (no build step, nothing fetched from the network) that draw
the charts and send curation requests to the API."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates

from . import adapters_view, runs_view
from .api import FILTERS, SortQ, known_params, memory_view, record_filter, studio
from .bank_map import COLOURS
from .memory_view import MAX_PER_PAGE, SORTS, MemoryView, RecordFilter
from .studio import Studio

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
router = APIRouter()
S = Annotated[Studio, Depends(studio)]
M = Annotated[MemoryView, Depends(memory_view)]


def when(t: float | None) -> str:
    """A UNIX time as local `YYYY-MM-DD HH:MM:SS` (`-` for None)."""
    import time

    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


templates.env.filters["when"] = when
templates.env.filters["pct"] = pct


def page(
    request: Request, name: str, s: Studio, section: str, m: MemoryView | None = None, **context: Any
) -> HTMLResponse:
    """Render template `name` with the studio's header data and the CSRF token; with `m`, the
    namespace shown (`ns`) and the query that keeps it in links (`nsq`: empty for the default one)."""
    ns = (m or s.memory).namespace
    nsq = "" if ns == s.bank.namespace else "?" + urlencode({"namespace": ns})
    return templates.TemplateResponse(
        request,
        name,
        {"about": s.about(), "csrf": request.app.state.guard.csrf, "section": section, "ns": ns, "nsq": nsq} | context,
    )


def namespace_names(s: Studio) -> list[str]:
    """The home's namespaces, for the namespace filter."""
    return [n["name"] for n in s.namespaces()["namespaces"]] or [s.bank.namespace]


@router.get("/", response_class=HTMLResponse, dependencies=[known_params()])
def runs_page(request: Request, s: S):
    return page(request, "runs.html", s, "runs", runs=runs_view.runs(s.stores))


@router.get("/runs/{run_id}", response_class=HTMLResponse, dependencies=[known_params()])
def run_page(request: Request, run_id: str, s: S):
    return page(request, "run.html", s, "runs", data=runs_view.run_detail(s.stores, run_id))


@router.get("/runs/{run_id}/episodes/{number}", response_class=HTMLResponse, dependencies=[known_params()])
def episode_page(request: Request, run_id: str, number: int, s: S):
    return page(
        request, "episode.html", s, "runs", data=runs_view.episode_detail(s.stores, run_id, number, s.bank.namespace)
    )


@router.get("/compare", response_class=HTMLResponse, dependencies=[known_params("run", "all_pairs")])
def compare_page(
    request: Request,
    s: S,
    run: Annotated[list[str], Query(max_length=128)] = [],  # noqa: B006 (FastAPI copies defaults)
    all_pairs: bool = False,
):
    data = runs_view.compare(s.stores, run, all_pairs)
    return page(request, "compare.html", s, "runs", data=data, all_pairs=all_pairs, run_ids=run)


@router.get("/experiments", response_class=HTMLResponse, dependencies=[known_params()])
def experiments_page(request: Request, s: S):
    folders = runs_view.experiment_folders(s.results)
    return page(request, "experiments.html", s, "experiments", folders=folders, data=None)


@router.get("/experiments/{name:path}", response_class=HTMLResponse, dependencies=[known_params()])
def experiment_page(request: Request, name: str, s: S):
    folders = runs_view.experiment_folders(s.results)
    return page(
        request, "experiments.html", s, "experiments", folders=folders, data=runs_view.experiment(s.results, name)
    )


def filter_query(flt: RecordFilter, **more: Any) -> str:
    """The query string of a filter set (for pagination links), without empty values."""
    pairs = {name: getattr(flt, name) for name in FILTERS} | more
    return urlencode({k: v for k, v in pairs.items() if v not in (None, "")})


@router.get(
    "/memories",
    response_class=HTMLResponse,
    dependencies=[known_params(*FILTERS, "namespace", "sort", "page", "per_page", "q")],
)
def memories_page(
    request: Request,
    s: S,
    m: M,
    flt: Annotated[RecordFilter, Depends(record_filter)],
    sort: SortQ = "recent",
    page_no: Annotated[int, Query(ge=1, alias="page")] = 1,
    per_page: Annotated[int, Query(ge=1, le=MAX_PER_PAGE)] = 50,
    q: Annotated[str, Query(max_length=2000)] = "",
):
    hits = None
    listing = None
    if q.strip():
        kinds = (flt.kind,) if flt.kind in ("episode", "step") else ("episode", "step")
        hits = m.search(q, per_page, flt.family, kinds, include_quarantine=flt.tier == "quarantine")
    else:
        listing = m.page(flt, sort, page_no, per_page)
    shown_ns = m.namespace if m.namespace != s.bank.namespace else None
    return page(
        request,
        "memories.html",
        s,
        "memories",
        m,
        namespaces=namespace_names(s),
        flt=flt,
        sort=sort,
        sorts=list(SORTS),
        q=q,
        hits=hits,
        listing=listing,
        per_page=per_page,
        families=m.families(),
        query=lambda **more: filter_query(flt, namespace=shown_ns, sort=sort, per_page=per_page, **more),
    )


@router.get("/memories/{record_id}", response_class=HTMLResponse, dependencies=[known_params("namespace")])
def memory_page(request: Request, record_id: str, s: S, m: M):
    if record_id.startswith("ru:"):
        suffix = "" if m.namespace == s.bank.namespace else "?" + urlencode({"namespace": m.namespace})
        return RedirectResponse(f"/rules/{record_id}{suffix}", status_code=303)
    return page(request, "memory.html", s, "memories", m, data=m.record(record_id))


@router.get("/map", response_class=HTMLResponse, dependencies=[known_params(*FILTERS, "namespace", "color", "limit")])
def map_page(
    request: Request,
    s: S,
    m: M,
    flt: Annotated[RecordFilter, Depends(record_filter)],
    color: str = "outcome",
    limit: Annotated[int, Query(ge=1, le=5000)] = 2000,
):
    if color not in COLOURS:
        raise ValueError(f"color must be one of {', '.join(COLOURS)}, not {color!r}")
    shown_ns = m.namespace if m.namespace != s.bank.namespace else None
    return page(
        request,
        "map.html",
        s,
        "map",
        m,
        namespaces=namespace_names(s),
        flt=flt,
        color=color,
        colours=COLOURS,
        limit=limit,
        families=m.families(),
        api=f"/api/map?{filter_query(flt, namespace=shown_ns, color=color, limit=limit)}",
    )


@router.get(
    "/rules", response_class=HTMLResponse, dependencies=[known_params("scope", "include_quarantine", "namespace")]
)
def rules_page(request: Request, s: S, m: M, scope: str = "", include_quarantine: bool = False):
    rules = m.rules(scope or None, include_quarantine)
    by_scope: dict[str, list[dict[str, Any]]] = {}
    for r in rules:
        by_scope.setdefault(r["scope_label"], []).append(r)
    return page(
        request, "rules.html", s, "rules", m, by_scope=by_scope, scope=scope, include_quarantine=include_quarantine
    )


@router.get("/rules/{rule_id}", response_class=HTMLResponse, dependencies=[known_params("namespace")])
def rule_page(request: Request, rule_id: str, s: S, m: M):
    return page(request, "rule.html", s, "rules", m, data=m.rule(rule_id))


@router.get("/adapters", response_class=HTMLResponse, dependencies=[known_params()])
def adapters_page(request: Request, s: S):
    return page(
        request, "adapters.html", s, "adapters", data=adapters_view.adapters(s.registry, s.quarantined(), s.taints())
    )


@router.get("/adapters/{adapter_id}", response_class=HTMLResponse, dependencies=[known_params()])
def adapter_page(request: Request, adapter_id: str, s: S):
    return page(request, "adapter.html", s, "adapters", data=adapters_view.adapter(s.registry, adapter_id, s.taints()))
