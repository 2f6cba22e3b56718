"""The namespaces of a home, as a browser lists them: each with whether the store holds its view.

A namespace belongs to a home when it has a directory there (`namespaces.namespaces`): its
journal lives in it. A Chroma server shared by several homes also holds other homes' namespaces
(collections `<ns>-...` whose journal is elsewhere); they are counted apart and never opened
from this home, since a bank opened here would start a journal of its own for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crl.memory.storage.namespaces import namespaces, primary_namespace


@dataclass(frozen=True)
class NamespaceInfo:
    """One namespace of a home: its name, whether it is the home's first (files at the top of the
    memory directory) and whether the store holds its view (`<name>-meta`)."""

    name: str
    primary: bool
    in_store: bool


def store_namespaces(client: Any) -> set[str]:
    """Every namespace the Chroma client's store holds a view of (a `<ns>-meta` collection)."""
    found = set()
    for col in client.list_collections():
        name = getattr(col, "name", None) or str(col)
        if name.endswith("-meta") and name.count("-") == 1:
            found.add(name[: -len("-meta")])
    return found


def home_namespaces(memory_dir: Path, client: Any) -> tuple[list[NamespaceInfo], list[str]]:
    """The home's namespaces (the first one first, then by name) and the names of namespaces the
    store holds that are not this home's (another home's, on a shared server)."""
    held = store_namespaces(client)
    first = primary_namespace(Path(memory_dir))
    mine = namespaces(Path(memory_dir))
    infos = [NamespaceInfo(n, n == first, n in held) for n in mine]
    return infos, sorted(held - set(mine))
