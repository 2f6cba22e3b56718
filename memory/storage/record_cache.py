"""Parsed records of an embedded store, kept in process by id, so a query reads ids and distances
from the index and only the records it has not seen before from Chroma's metadata segment.

Reading metadata is what a query costs (about 0.18 ms a record through Chroma's SQLite against
about 2 ms for a whole k=50 HNSW search over 10k vectors; `bench/memory_bench.py`), and parsing
it costs 70 us more. The cache is exact only while this process is the store's one writer, as an
embedded store's owner is (`memory.storage.locks`): every write through the view drops the ids it
touches, and a fill that raced a write is not kept. A server store is never cached, since other
writers change it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class CachedRecord:
    """A stored record as the view read it: parsed record (no trajectory), vector, collection and
    the journal offset its metadata carried."""

    record: Any
    vector: np.ndarray | None
    collection: str
    jseq: int


class RecordCache:
    """An LRU of `CachedRecord` by record id, at most `size` entries; thread-safe.

    `generation` moves on every drop, so a reader takes it before reading Chroma and passes it to
    `fill`: what it read is kept only if no write happened meanwhile.
    """

    def __init__(self, size: int):
        if size < 1:
            raise ValueError("a record cache holds at least one record; use None for no cache")
        self.size = size
        self.generation = 0
        self.hits = 0
        self.misses = 0
        self._entries: OrderedDict[str, CachedRecord] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get_many(self, ids: list[str]) -> tuple[dict[str, CachedRecord], list[str]]:
        """The cached entries among `ids`, and the ids not cached (in order, once each)."""
        found: dict[str, CachedRecord] = {}
        missing: list[str] = []
        with self._lock:
            for rid in dict.fromkeys(ids):
                entry = self._entries.get(rid)
                if entry is None:
                    missing.append(rid)
                else:
                    self._entries.move_to_end(rid)
                    found[rid] = entry
            self.hits += len(found)
            self.misses += len(missing)
        return found, missing

    def fill(self, entries: dict[str, CachedRecord], generation: int) -> None:
        """Keep `entries`, read when `generation` was current, unless a write came since."""
        with self._lock:
            if generation != self.generation:
                return
            for rid, entry in entries.items():
                self._entries[rid] = entry
                self._entries.move_to_end(rid)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def drop(self, ids: list[str] | None = None) -> None:
        """Forget `ids` (every record when None): they are being written."""
        with self._lock:
            self.generation += 1
            if ids is None:
                self._entries.clear()
            else:
                for rid in ids:
                    self._entries.pop(rid, None)

    def stats(self) -> dict[str, int]:
        """Hits, misses and size so far."""
        return {"hits": self.hits, "misses": self.misses, "size": len(self._entries)}


def matches(record: Any, where: dict[str, Any]) -> bool:
    """Whether `record` passes an equality filter on its fields (the `where` a query may carry)."""
    return all(getattr(record, key, None) == value for key, value in where.items())


def simple_filter(where: dict[str, Any] | None) -> bool:
    """Whether `where` is a filter `matches` can apply: field equal to a scalar, no operators."""
    return where is None or all(
        not key.startswith("$") and isinstance(value, (str, int, float, bool)) for key, value in where.items()
    )
