"""Namespaces: several separate memories (users, teams, projects) in one data directory and one store.

A namespace is a whole bank of its own: its records live in the Chroma collections named
`<namespace>-...` (the store layer only ever lists, reads and writes collections with its own
prefix, so a query cannot reach another namespace's records), and its journal, watermark,
imports and backups in a directory of its own:

    <memory>/                    the home's first namespace (the one named in `<memory>/namespace`)
    <memory>/namespaces/<ns>/    every other namespace

so a home used before namespaces existed keeps its files where they were. Runs say which
namespace they learned into (`run.json` -> settings.memory.namespace); `sync` reads only the
logs of its own namespace's runs, and a run of another namespace is refused at ingest.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

MARKER = "namespace"
SUBDIR = "namespaces"
DEFAULT = "crl"  # `MemoryConfig.namespace`'s default


def primary_namespace(memory_dir: Path, claim: str | None = None) -> str | None:
    """The namespace that lives at the top of `memory_dir`; with `claim`, make it that one if none is yet.

    The claim is an exclusive create, so two processes opening a fresh home at once agree.
    """
    marker = memory_dir / MARKER
    if claim is not None and not marker.exists():
        memory_dir.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as f:
                f.write(claim + "\n")
            return claim
    try:
        return marker.read_text().strip() or None
    except OSError:
        return None


def namespace_dir(memory_dir: Path, namespace: str, legacy_owner: Callable[[], bool] | None = None) -> Path:
    """Where `namespace`'s journal and state live (claiming the top for the home's first namespace).

    A memory directory from before namespaces (a journal at the top, no marker) is claimed only
    by the default namespace or by one whose view the store holds (`legacy_owner()`), so a
    mistyped `--namespace` cannot take a home's existing memory.
    """
    memory_dir = Path(memory_dir)
    claim: str | None = namespace
    if not (memory_dir / MARKER).exists() and (memory_dir / "journal.jsonl").exists():
        if namespace != DEFAULT and not (legacy_owner is not None and legacy_owner()):
            claim = None
    if primary_namespace(memory_dir, claim=claim) == namespace:
        return memory_dir
    return memory_dir / SUBDIR / namespace


def namespaces(memory_dir: Path) -> list[str]:
    """Every namespace with a directory under `memory_dir`, the primary one first."""
    memory_dir = Path(memory_dir)
    first = primary_namespace(memory_dir)
    others = sorted(p.name for p in (memory_dir / SUBDIR).glob("*") if p.is_dir())
    return ([first] if first else []) + [n for n in others if n != first]


@lru_cache(maxsize=4096)
def _recorded(run_file: str, mtime_ns: int) -> str | None:
    try:
        data = json.loads(Path(run_file).read_text())
    except (OSError, ValueError):
        return None
    memory = (data.get("settings") or {}).get("memory") if isinstance(data, dict) else None
    ns = memory.get("namespace") if isinstance(memory, dict) else None
    return ns if isinstance(ns, str) and ns else None


def run_namespace(runs_dir: Path | None, run_id: str) -> str | None:
    """The namespace run `run_id` learns into, from its `run.json`; None when it records none
    (no such file: a synthetic or hand-written episode; a run logged before namespaces)."""
    if runs_dir is None or not run_id or "/" in run_id or run_id.startswith("."):
        return None
    run_file = Path(runs_dir) / run_id / "run.json"
    try:
        mtime = run_file.stat().st_mtime_ns
    except OSError:
        return None
    return _recorded(str(run_file), mtime)


def belongs(runs_dir: Path | None, run_id: str, namespace: str, primary: bool) -> bool:
    """Whether run `run_id`'s episodes belong in `namespace` (runs that name none belong to the primary one)."""
    recorded = run_namespace(runs_dir, run_id)
    return recorded == namespace if recorded is not None else primary
