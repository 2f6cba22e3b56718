"""The Chroma view: the materialised, queryable copy of the bank's logs.

Layout. Measured before this issue: a Chroma `where` filter at 100k records is 20-65x
slower than an unfiltered query, and the retriever filters every query by task family and
outcome. So the filters live in the layout instead: one collection per record kind, task
family and bucket, where the bucket is

    ok    records of successful episodes whose success the environment verified (or a curator vouched
          for: `records.counts_as_success`)
    u     records that claim a success nobody verified (an import released from quarantine
          without review): kept apart so that a retrieval that counts verified successes only
          (`retrieval.defences` "verified_only") never searches them, and a crowd of them cannot
          change which trusted neighbours an approximate (HNSW) search finds
    fail  records of failed or unfinished episodes
    q     quarantined records (never searched unless asked for)

e.g. `crl-st-keyroom-ok`. A family + outcome query is then a plain k-NN query on one
collection (a success query asks `ok`, and `u` unless verified successes only are wanted); an
unfiltered one queries `ok`, `u` and `fail` and merges by distance. Rules are few
and live in one collection (`crl-rules`), filtered in Python. Every write is an idempotent
upsert by deterministic id, chunked by the client's max batch size. Each record's metadata
holds the whole record as JSON under `record` (episodes keep their trajectory in the
document), a few flat fields for people browsing the store with other tools, and
`jseq_<journal>`: the journal offset of the last entry applied to it.

A purpose query (the steps that worked toward one sub-goal, `memory.purpose`) is a filter too, and
at 100k records neither Chroma's filtered search (0.4 s: it reads the filter's whole id set) nor an
over-fetched unfiltered one (k x 64) is cheap. So each family's steps with a purpose are also indexed
by purpose: `crl-sp-keyroom-door-ok` holds the ids and vectors (no metadata) of the `ok` steps that
worked toward the door, and a purpose query is a plain k-NN query on it whose records are read from
the step collections (through the record cache when there is one). Quarantined steps are not indexed.
Views stamped before the current layout (`layout` < `LAYOUT` in `crl-meta`) are rebuilt on open.

The collection `crl-meta` carries the view's schema version, layout, embedding model and id.
Each collection's configuration names its embedding function (for the real model, Chroma's
own `sentence_transformer` on the local model folder), so a plain Chroma client can query
the view by text. Collections written by an older crl name crl's former function; they stay
readable and writable (the bank passes vectors explicitly), and `legacy_collections()` lists
them so the view can be rebuilt with the interoperable one.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import numpy as np

from crl.memory.config import MemoryConfig
from crl.memory.errors import BankError
from crl.memory.records import (
    SCHEMA_VERSION,
    AnyRecord,
    EpisodeRecord,
    StepRecord,
    counts_as_success,
    parse_record_id,
    record_from_dict,
)
from crl.memory.storage.record_cache import CachedRecord, RecordCache, matches, simple_filter

BUCKETS = ("ok", "u", "fail", "q")
SEARCH_BUCKETS = ("ok", "u", "fail")
"""The buckets of records outside quarantine: what retrieval, reflection and datasets may read."""
SUCCESS_BUCKETS = ("ok", "u")
_KIND_CODE = {"episode": "ep", "step": "st"}
LAYOUT = 3
"""The collection layout's version (2: purpose indexes; 3: the `u` bucket), stamped in `crl-meta`."""
LAYOUT_CHANGES = {2: "purpose indexes", 3: "unverified success claims in a bucket of their own"}
INDEXED_BUCKETS = SEARCH_BUCKETS
PURPOSE_KIND = "step-purpose"
WHERE_OVERFETCH = (8, 64)
"""How many times `k` neighbours a filtered query reads from the index, widening in turn, before
it falls back to Chroma's filtered search (with a record cache; that search reads the filter's
whole id set from SQLite: 0.4 s at 100k records)."""


class StoreError(BankError, RuntimeError):
    """The view cannot be opened or used; the message says what to do."""


class NewerSchemaError(StoreError):
    """The store was written by a newer crl."""


@dataclass
class Hit:
    """One search result: the record, its id and cosine similarity to the query (and its stored
    vector when the query asked for it, which saves a second read for MMR)."""

    id: str
    similarity: float
    record: AnyRecord
    embedding: np.ndarray | None = None

    @property
    def distance(self) -> float:
        """Cosine distance (1 - similarity)."""
        return 1.0 - self.similarity


@dataclass
class Located:
    """Where a record lives in the view, its parsed record and last applied journal offset."""

    record: AnyRecord
    collection: str
    jseq: int


def bucket_of(record: AnyRecord) -> str:
    """The bucket a record belongs in (see the module docstring)."""
    if record.tier == "quarantine":
        return "q"
    outcome = record.outcome if isinstance(record, EpisodeRecord) else getattr(record, "episode_outcome", "")
    if outcome != "success":
        return "fail"
    return "ok" if counts_as_success(record) else "u"


def buckets_for(tier: str | None = None, outcome: str | None = None) -> tuple[str, ...]:
    """The buckets that can hold records of `tier` and `outcome` (None: any)."""
    buckets = BUCKETS
    if tier == "quarantine":
        buckets = ("q",)
    elif tier is not None:
        buckets = SEARCH_BUCKETS
    if outcome == "success":
        buckets = tuple(b for b in buckets if b != "fail")
    elif outcome in ("failure", "unfinished"):
        buckets = tuple(b for b in buckets if b not in SUCCESS_BUCKETS)
    return buckets


def _slug(family: str) -> str:
    slug = re.sub(r"[^a-zA-Z0-9._]", "_", family)
    if slug != family:
        slug += "." + hashlib.sha1(family.encode()).hexdigest()[:8]
    return slug


def _purpose_slug(purpose: str) -> str:
    slug = re.sub(r"[^a-zA-Z0-9_]", "_", purpose)[:48]
    if slug != purpose:
        slug += "." + hashlib.sha1(purpose.encode()).hexdigest()[:8]
    return slug


def purpose_of(where: dict[str, Any] | None) -> str | None:
    """The purpose a `where` asks for when it asks for nothing else (None otherwise)."""
    if where is None or set(where) != {"purpose"} or not isinstance(where["purpose"], str):
        return None
    return where["purpose"] or None


def to_chroma(record: AnyRecord) -> tuple[str, dict[str, Any]]:
    """The document and metadata a record is stored with."""
    body = record.model_dump(mode="json", exclude={"trajectory"} if isinstance(record, EpisodeRecord) else None)
    if isinstance(record, EpisodeRecord):
        document = json.dumps([s.model_dump(mode="json") for s in record.trajectory], ensure_ascii=False)
        outcome = record.outcome
    else:
        document = record.text
        outcome = getattr(record, "episode_outcome", "")
    meta: dict[str, Any] = {
        "record": json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")),
        "kind": record.kind,
        "family": record.family,
        "tier": record.tier,
        "source": record.source,
        "value": float(record.value),
        "utility": float(record.utility),
        "use_count": int(record.use_count),
        "created_at": float(record.created_at),
        "outcome": outcome,
        "tags": ",".join(record.tags),
    }
    if not isinstance(record, EpisodeRecord | StepRecord):
        return document, meta
    meta.update(
        variant=record.variant,
        episode_id=record.episode_id,
        run_id=record.run_id,
        skills=",".join(record.skills),
    )
    if isinstance(record, StepRecord):
        meta["purpose"] = record.purpose or ""
    return document, meta


def from_chroma(metadata: dict[str, Any], document: str | None = None) -> AnyRecord:
    """The record stored with `metadata` (and, for a full episode, its `document`)."""
    data = json.loads(metadata["record"])
    if data.get("kind") == "episode" and document is not None:
        data["trajectory"] = json.loads(document)
    return record_from_dict(data)


def _function_name(collection: Any) -> str | None:
    """The embedding function name stored in a collection's configuration (None: none or legacy)."""
    try:
        stored = (collection.configuration_json or {}).get("embedding_function") or {}
    except Exception:
        return None
    return stored.get("name") if stored.get("type") == "known" else None


def _own_function_name(embedder: Any) -> str | None:
    name = getattr(embedder, "name", None)
    return name() if callable(name) else None


def connect(config: MemoryConfig, chroma_dir: Path):
    """A Chroma client: HttpClient in server mode, else PersistentClient on `chroma_dir`.

    Telemetry is off either way. A server client raises `outage.ServerUnavailable` (one line)
    when the server stops answering, instead of httpx's own errors.
    """
    import chromadb
    from chromadb.config import Settings

    settings = Settings(anonymized_telemetry=False, allow_reset=False)
    if config.url is None:
        chroma_dir.mkdir(parents=True, exist_ok=True)
        return chromadb.PersistentClient(path=str(chroma_dir), settings=settings)
    parsed = urlparse(config.url)
    ssl = parsed.scheme == "https"
    port = parsed.port or (443 if ssl else 8000)
    headers = config.resolved_headers()
    try:
        from crl.memory.storage.outage import guard

        client = guard(
            chromadb.HttpClient(host=parsed.hostname, port=port, ssl=ssl, headers=headers, settings=settings),
            config.url,
        )
        client.heartbeat()
    except Exception as e:
        raise StoreError(
            f"cannot reach the Chroma server at {config.url} ({e}). Start one with "
            f"`chroma run --path DIR --host 127.0.0.1 --port {port}`; if it sits behind an authenticating "
            f"proxy, put a bearer token in ${config.token_env} or headers (JSON) in ${config.headers_env}; "
            "or drop --memory-url to use an embedded store"
        ) from None
    return client


class ChromaView:
    """Typed reads and writes of records on a Chroma client, in the layout described above."""

    def __init__(
        self, client: Any, embedder: Any, config: MemoryConfig, journal_id: str, use_purpose_index: bool = True
    ):
        """`config.record_cache_size` records are kept parsed in process when this view is its
        store's only writer (embedded mode); a server view reads every query's records from Chroma.
        Writes always keep the purpose indexes; `use_purpose_index=False` answers purpose queries with
        Chroma's filtered search instead (for comparison)."""
        self.client = client
        self.embedder = embedder
        self.ns = config.namespace
        self.hnsw = {
            "space": "cosine",
            "ef_search": config.hnsw_ef_search,
            "ef_construction": config.hnsw_ef_construction,
            "max_neighbors": config.hnsw_max_neighbors,
        }
        self.jkey = f"jseq_{journal_id[:12]}"
        self.batch = int(client.get_max_batch_size())
        self._cols: dict[str, Any] = {}
        self._names: dict[str, dict[str, Any]] = {}
        self._functions: dict[str, str | None] = {}
        size = 0 if config.server_mode else config.record_cache_size
        self.records: RecordCache | None = RecordCache(size) if size else None
        self._counts: dict[tuple, tuple[int, int]] = {}
        self.documents: RecordCache | None = RecordCache(max(1, size // 16)) if size else None
        self._listed = False
        self.use_purpose_index = use_purpose_index

    # ---- naming and collections -------------------------------------------------------

    def name_of(self, kind: str, family: str, bucket: str) -> str:
        """The collection a record of `kind`/`family` in `bucket` lives in."""
        if kind == "rule":
            return f"{self.ns}-rules"
        return f"{self.ns}-{_KIND_CODE[kind]}-{_slug(family)}-{bucket}"

    def purpose_index_name(self, family: str, purpose: str, bucket: str) -> str:
        """The collection indexing the `bucket` steps of `family` that worked toward `purpose`."""
        return f"{self.ns}-sp-{_slug(family)}-{_purpose_slug(purpose)}-{bucket}"

    def _purpose_index(self, family: str, purpose: str, bucket: str, create: bool = False) -> Any | None:
        meta = {"crl_kind": PURPOSE_KIND, "crl_family": family, "crl_bucket": bucket, "crl_purpose": purpose}
        return self._collection(self.purpose_index_name(family, purpose, bucket), create, meta)

    def _purpose_indexes(self, family: str, bucket: str) -> list[str]:
        """The purpose-index collections of `family` and `bucket`."""
        if not (self.records is not None and self._listed):
            self._refresh_names()
        return sorted(
            name
            for name, m in self._names.items()
            if m.get("crl_kind") == PURPOSE_KIND and m.get("crl_family") == family and m.get("crl_bucket") == bucket
        )

    @property
    def meta_name(self) -> str:
        return f"{self.ns}-meta"

    def _refresh_names(self) -> None:
        names, functions = {}, {}
        for col in self.client.list_collections():
            name = col.name if hasattr(col, "name") else str(col)
            if name.startswith(self.ns + "-"):
                names[name] = dict(col.metadata or {}) if hasattr(col, "metadata") else {}
                functions[name] = _function_name(col)
        self._functions = functions
        self._names = names  # swapped whole: a reader in another thread never sees it half-built
        self._listed = True  # the sole writer (a record cache) sees every collection it creates after this

    def forget_collections(self) -> None:
        """Drop cached collection handles (another process replaced the view)."""
        self._cols = {}
        self._names = {}
        self._functions = {}
        self._listed = False
        self._forget(None)

    def _forget(self, ids: list[str] | None) -> None:
        """Drop `ids` (all when None) from the record caches."""
        if self.records is not None:
            self.records.drop(ids)
        if self.documents is not None:
            self.documents.drop(ids)

    @contextmanager
    def _writing(self, ids: list[str]) -> Iterator[None]:
        """Around a write of `ids`: their cached copies are dropped before and after it, so a read
        that overlapped the write is not kept either."""
        self._forget(ids)
        try:
            yield
        finally:
            self._forget(ids)

    def _foreign_function(self, name: str) -> bool:
        """Whether collection `name` names another embedding function than this view's (an older crl's)."""
        stored = self._functions.get(name)
        return stored is not None and stored != _own_function_name(self.embedder)

    def legacy_collections(self) -> list[str]:
        """Collections whose stored embedding function is not this view's (rebuild the view to update them)."""
        self._refresh_names()
        return sorted(name for name in self._names if self._foreign_function(name))

    def _collection(self, name: str, create: bool, meta: dict[str, Any] | None = None) -> Any | None:
        col = self._cols.get(name)
        if col is not None:
            return col
        if name not in self._names and not (self.records is not None and self._listed):
            self._refresh_names()
        if name in self._names:
            # a collection an older crl wrote keeps its stored function; passing ours would conflict
            function = None if self._foreign_function(name) else self.embedder
            try:
                col = self.client.get_collection(name, embedding_function=function)
            except Exception:
                self._names.pop(name, None)
                col = None
        else:
            col = None
        if col is None and create:
            col = self.client.get_or_create_collection(
                name,
                configuration={"hnsw": self.hnsw},
                metadata=meta or {"crl": 1},
                embedding_function=self.embedder,
            )
            self._names[name] = dict(col.metadata or {})
            self._functions[name] = _own_function_name(self.embedder)
        if col is None:
            return None
        self._cols[name] = col
        return col

    def _for(self, kind: str, family: str, bucket: str, create: bool = False) -> Any | None:
        meta = {"crl_kind": kind, "crl_family": family, "crl_bucket": bucket}
        return self._collection(self.name_of(kind, family, bucket), create, meta)

    def families(self, kind: str) -> list[str]:
        """Task families (or rule scopes) with records of `kind`."""
        self._refresh_names()
        if kind == "rule":
            return sorted({r.family for r, _ in self.scan("rule")})
        return sorted(
            {m["crl_family"] for m in self._names.values() if m.get("crl_kind") == kind and "crl_family" in m}
        )

    def collection_names(self) -> list[str]:
        """Every collection of this namespace."""
        self._refresh_names()
        return sorted(self._names)

    # ---- meta -------------------------------------------------------------------------

    def meta(self) -> dict[str, Any] | None:
        """The view's metadata (schema version, embedding, view id), or None for an empty store."""
        col = self._collection(self.meta_name, create=False)
        return None if col is None else dict(col.metadata or {})

    def init_meta(self, embedding: str, now: float) -> dict[str, Any]:
        """Stamp a fresh view with this crl's schema version and embedding model."""
        meta = {
            "schema_version": SCHEMA_VERSION,
            "layout": LAYOUT,
            "embedding": embedding,
            "view_id": uuid.uuid4().hex,
            "created_at": now,
        }
        col = self._collection(self.meta_name, create=True, meta=meta)
        if dict(col.metadata or {}).get("view_id") != meta["view_id"]:
            col.modify(metadata=meta)
        return meta

    def wipe(self) -> None:
        """Delete every collection of this namespace, the meta collection included."""
        for name in self.collection_names():
            self.client.delete_collection(name)
        self.forget_collections()

    # ---- writes -----------------------------------------------------------------------

    def _chunks(self, n: int) -> Iterable[slice]:
        for start in range(0, n, self.batch):
            yield slice(start, min(n, start + self.batch))

    def own(self, record: AnyRecord) -> AnyRecord:
        """`record` as this namespace stores it (no namespace label: its collections say it).

        Raises:
            StoreError: the record is labelled with another namespace (it may never be written here).
        """
        label = getattr(record, "namespace", None)
        if label is None:
            return record
        if label != self.ns:
            raise StoreError(f"record {record.id} belongs to memory namespace {label!r}, not {self.ns!r}")
        return record.model_copy(update={"namespace": None})

    def put(self, records: list[AnyRecord], embeddings: np.ndarray, jseq: int | None) -> None:
        """Upsert records with their embeddings (row i belongs to record i)."""
        records = [self.own(r) for r in records]
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(records):
            groups.setdefault(self.name_of(r.kind, r.family, bucket_of(r)), []).append(i)
        for rows in groups.values():
            first = records[rows[0]]
            col = self._for(first.kind, first.family, bucket_of(first), create=True)
            ids, docs, metas = [], [], []
            for i in rows:
                doc, meta = to_chroma(records[i])
                if jseq is not None:
                    meta[self.jkey] = jseq
                ids.append(records[i].id)
                docs.append(doc)
                metas.append(meta)
            vecs = np.asarray(embeddings, dtype=np.float32)[rows]
            with self._writing(ids):
                for sl in self._chunks(len(ids)):
                    col.upsert(ids=ids[sl], embeddings=vecs[sl], documents=docs[sl], metadatas=metas[sl])
        self._index_purposes(records, np.asarray(embeddings, dtype=np.float32))

    def _index_purposes(self, records: list[AnyRecord], vectors: np.ndarray) -> None:
        """Add the searchable steps among `records` (row i: record i's vector) to their purpose indexes."""
        groups: dict[tuple[str, str, str], list[int]] = {}
        for i, r in enumerate(records):
            if isinstance(r, StepRecord) and r.purpose and bucket_of(r) in INDEXED_BUCKETS:
                groups.setdefault((r.family, r.purpose, bucket_of(r)), []).append(i)
        for (family, purpose, bucket), rows in groups.items():
            col = self._purpose_index(family, purpose, bucket, create=True)
            ids = [records[i].id for i in rows]
            for sl in self._chunks(len(ids)):
                col.upsert(ids=ids[sl], embeddings=vectors[rows][sl])

    def _unindex_purposes(self, family: str, bucket: str, ids: list[str]) -> None:
        """Remove `ids` from every purpose index of `family` and `bucket` (absent ids are ignored)."""
        if bucket not in INDEXED_BUCKETS or not ids:
            return
        for name in self._purpose_indexes(family, bucket):
            col = self._collection(name, create=False)
            if col is not None:
                for sl in self._chunks(len(ids)):
                    col.delete(ids=ids[sl])

    def update(self, changes: list[tuple[Located, AnyRecord]], jseq: int | None) -> None:
        """Write changed records; a record whose bucket changed moves with its embedding."""
        in_place: dict[str, list[AnyRecord]] = {}
        moves: list[tuple[Located, AnyRecord]] = []
        changes = [(loc, self.own(new)) for loc, new in changes]
        repurposed: list[tuple[Located, AnyRecord]] = []
        for loc, new in changes:
            target = self.name_of(new.kind, new.family, bucket_of(new))
            if target == loc.collection:
                in_place.setdefault(target, []).append(new)
                if isinstance(new, StepRecord) and getattr(loc.record, "purpose", None) != new.purpose:
                    repurposed.append((loc, new))
            else:
                moves.append((loc, new))
        for name, recs in in_place.items():
            col = self._collection(name, create=False)
            metas = []
            for r in recs:
                _, meta = to_chroma(r)
                if jseq is not None:
                    meta[self.jkey] = jseq
                metas.append(meta)
            ids = [r.id for r in recs]
            with self._writing(ids):
                for sl in self._chunks(len(ids)):
                    col.update(ids=ids[sl], metadatas=metas[sl])
        if repurposed:
            vectors = self.embeddings_of([loc for loc, _ in repurposed])
            for _, new in repurposed:
                self._unindex_purposes(new.family, bucket_of(new), [new.id])
                if new.id in vectors:
                    self._index_purposes([new], vectors[new.id][None])
        if moves:
            vectors = self.embeddings_of([loc for loc, _ in moves])
            keep = [(loc, new) for loc, new in moves if new.id in vectors]
            full = self.locate([new.id for _, new in keep], documents=True)
            recs = []
            for _, new in keep:
                if isinstance(new, EpisodeRecord) and not new.trajectory and new.id in full:
                    new = new.model_copy(update={"trajectory": full[new.id].record.trajectory})
                recs.append(new)
            self.put(recs, np.stack([vectors[r.id] for r in recs]) if recs else np.zeros((0, 1)), jseq)
            by_col: dict[str, list[str]] = {}
            for loc, new in keep:
                by_col.setdefault(loc.collection, []).append(new.id)
            for name, ids in by_col.items():
                self.delete_from(name, ids)

    def delete_from(self, collection: str, ids: list[str]) -> None:
        """Delete `ids` from one collection (a record's old copy after it moved bucket)."""
        col = self._collection(collection, create=False)
        if col is not None:
            with self._writing(ids):
                for sl in self._chunks(len(ids)):
                    col.delete(ids=ids[sl])
            self._unindex_step_collection(collection, ids)

    def _unindex_step_collection(self, collection: str, ids: list[str]) -> None:
        """After `ids` left step collection `collection`: drop them from its purpose indexes."""
        meta = self._names.get(collection) or {}
        if meta.get("crl_kind") == "step":
            self._unindex_purposes(meta["crl_family"], meta.get("crl_bucket", ""), ids)

    def delete(self, ids: list[str]) -> int:
        """Delete records by id wherever they are; returns how many existed."""
        found = self.locate(ids)
        by_col: dict[str, list[str]] = {}
        for rid, loc in found.items():
            by_col.setdefault(loc.collection, []).append(rid)
        for name, col_ids in by_col.items():
            col = self._collection(name, create=False)
            with self._writing(col_ids):
                for sl in self._chunks(len(col_ids)):
                    col.delete(ids=col_ids[sl])
            self._unindex_step_collection(name, col_ids)
        return len(found)

    # ---- reads ------------------------------------------------------------------------

    def _candidates(self, record_id: str) -> list[str]:
        kind, family, _ = parse_record_id(record_id)
        if kind == "rule":
            return [self.name_of("rule", family, "")]
        return [self.name_of(kind, family, b) for b in BUCKETS]

    def locate(self, ids: list[str], documents: bool = False) -> dict[str, Located]:
        """Find records by id across their possible buckets (missing ids are left out)."""
        found: dict[str, Located] = {}
        cache = self.documents if documents else self.records
        generation = cache.generation if cache is not None else 0
        if cache is not None:
            cached, ids = cache.get_many(ids)
            found = {rid: Located(e.record, e.collection, e.jseq) for rid, e in cached.items()}
        pending: dict[str, list[str]] = {}
        for rid in dict.fromkeys(ids):
            for name in self._candidates(rid):
                pending.setdefault(name, []).append(rid)
        include = ["metadatas", "documents"] if documents else ["metadatas"]
        for name, col_ids in pending.items():
            col_ids = [i for i in col_ids if i not in found]
            if not col_ids:
                continue
            col = self._collection(name, create=False)
            if col is None:
                continue
            for sl in self._chunks(len(col_ids)):
                got = col.get(ids=col_ids[sl], include=include)
                docs = got.get("documents") or [None] * len(got["ids"])
                for rid, meta, doc in zip(got["ids"], got["metadatas"], docs):
                    found[rid] = Located(
                        from_chroma(meta, doc if documents else None), name, int(meta.get(self.jkey, -1))
                    )
        if self.documents is not None and documents:
            self.documents.fill(
                {rid: CachedRecord(loc.record, None, loc.collection, loc.jseq) for rid, loc in found.items()},
                generation,
            )
        return found

    def embeddings_of(self, located: list[Located]) -> dict[str, np.ndarray]:
        """Stored embeddings of located records, by id."""
        by_col: dict[str, list[str]] = {}
        for loc in located:
            by_col.setdefault(loc.collection, []).append(loc.record.id)
        out: dict[str, np.ndarray] = {}
        for name, ids in by_col.items():
            col = self._collection(name, create=False)
            for sl in self._chunks(len(ids)):
                got = col.get(ids=ids[sl], include=["embeddings"])
                for rid, emb in zip(got["ids"], got["embeddings"]):
                    out[rid] = np.asarray(emb, dtype=np.float32)
        return out

    def scan(
        self,
        kind: str,
        families: Iterable[str] | None = None,
        buckets: Iterable[str] = BUCKETS,
        documents: bool = False,
        embeddings: bool = False,
        where: dict[str, Any] | None = None,
    ) -> Iterator[tuple[AnyRecord, np.ndarray | None]]:
        """Every record of `kind` (in the given families and buckets, matching the Chroma metadata
        filter `where` when given), page by page."""
        if kind == "rule":
            names = [self.name_of("rule", "", "")]
        else:
            fams = list(families) if families is not None else self.families(kind)
            names = [self.name_of(kind, f, b) for f in fams for b in buckets]
        include = ["metadatas"] + (["documents"] if documents else []) + (["embeddings"] if embeddings else [])
        for name in names:
            col = self._collection(name, create=False)
            if col is None:
                continue
            offset = 0
            while True:
                got = col.get(include=include, limit=self.batch, offset=offset, where=where)
                if not got["ids"]:
                    break
                docs = got.get("documents") if documents else None
                embs = got.get("embeddings") if embeddings else None
                for i, meta in enumerate(got["metadatas"]):
                    emb = None if embs is None else np.asarray(embs[i], dtype=np.float32)
                    yield from_chroma(meta, docs[i] if docs is not None else None), emb
                offset += len(got["ids"])

    def count(self, kind: str, family: str, buckets: Iterable[str] = BUCKETS) -> int:
        """How many records of `kind`/`family` the buckets hold (remembered until the next write when
        this view is its store's only writer)."""
        buckets = tuple(buckets)
        key = (kind, family, buckets)
        generation = self.records.generation if self.records is not None else None
        if generation is not None and self._counts.get(key, (None, 0))[0] == generation:
            return self._counts[key][1]
        total = 0
        for b in buckets:
            col = self._for(kind, family, b)
            if col is not None:
                total += col.count()
        if generation is not None:
            self._counts[key] = (generation, total)
        return total

    def query(
        self,
        kind: str,
        family: str,
        buckets: Iterable[str],
        embeddings: np.ndarray,
        k: int,
        with_embeddings: bool = False,
        where: dict[str, Any] | None = None,
        min_similarity: float | None = None,
    ) -> list[list[Hit]]:
        """The `k` nearest records to each query vector, merged over `buckets`, best first
        (`with_embeddings`: each hit carries its stored vector, read by the same query; `where`: a
        Chroma metadata filter, e.g. `{"purpose": "door"}`; `min_similarity`: hits less similar
        are not wanted, so a filtered search may stop once its neighbours are farther).

        With a record cache the index is asked for ids and distances only and the records come from
        the cache; a `where` of plain field equalities is then applied to over-fetched neighbour
        lists (`WHERE_OVERFETCH` times `k`, widening), asking Chroma's filtered search only for rows
        where the widest list holds fewer than `k` matches, the bucket has more records and its
        farthest neighbour is still as similar as `min_similarity`.
        """
        n = len(embeddings)
        merged: list[list[tuple[float, str, Any, Any]]] = [[] for _ in range(n)]
        cached = self.records is not None and simple_filter(where)
        vectors_in = np.asarray(embeddings, dtype=np.float32)
        purpose = purpose_of(where) if kind == "step" and self.use_purpose_index else None
        for b in buckets:
            col = self._for(kind, family, b)
            if col is None or n == 0:
                continue
            if purpose is not None and b in INDEXED_BUCKETS:
                index = self._purpose_index(family, purpose, b)
                if index is not None:
                    self._query_index(index, col, self.name_of(kind, family, b), vectors_in, k, where, merged)
                continue
            if cached:
                self._query_cached(col, self.name_of(kind, family, b), vectors_in, k, where, merged, min_similarity)
                continue
            include = ["metadatas", "distances"] + (["embeddings"] if with_embeddings else [])
            res = col.query(query_embeddings=vectors_in, n_results=k, include=include, where=where)
            for qi in range(n):
                vectors = res["embeddings"][qi] if with_embeddings else [None] * len(res["ids"][qi])
                for rid, meta, dist, vec in zip(res["ids"][qi], res["metadatas"][qi], res["distances"][qi], vectors):
                    merged[qi].append((float(dist), rid, from_chroma(meta), vec))
        out: list[list[Hit]] = []
        for rows in merged:
            rows.sort(key=lambda r: (r[0], r[1]))
            out.append(
                [
                    Hit(
                        rid,
                        1.0 - dist,
                        record,
                        None if vec is None or not with_embeddings else np.asarray(vec, dtype=np.float32),
                    )
                    for dist, rid, record, vec in rows[:k]
                ]
            )
        return out

    def _query_index(
        self,
        index: Any,
        col: Any,
        name: str,
        vectors: np.ndarray,
        k: int,
        where: dict[str, Any],
        merged: list[list[tuple[float, str, Any, Any]]],
    ) -> None:
        """One bucket of a purpose query through its purpose index: the index gives ids and distances,
        step collection `name` (or the record cache) the records; appends to `merged`."""
        res = index.query(query_embeddings=vectors, n_results=k, include=["distances"])
        wanted = list(dict.fromkeys(rid for row in res["ids"] for rid in row))
        entries = self.cached_records(col, name, wanted) if self.records is not None else self._read(col, name, wanted)
        for qi, (ids, dists) in enumerate(zip(res["ids"], res["distances"])):
            merged[qi] += [
                (float(d), rid, entries[rid].record, entries[rid].vector)
                for rid, d in zip(ids, dists)
                if rid in entries and matches(entries[rid].record, where)
            ]

    def _query_cached(
        self,
        col: Any,
        name: str,
        vectors: np.ndarray,
        k: int,
        where: dict[str, Any] | None,
        merged: list[list[tuple[float, str, Any, Any]]],
        min_similarity: float | None = None,
    ) -> None:
        """One bucket of `query` through the record cache (appends to `merged`)."""
        widths = [k] if where is None else [k * f for f in WHERE_OVERFETCH]
        pending = list(range(len(vectors)))
        for wide in widths:
            res = col.query(query_embeddings=vectors[pending], n_results=wide, include=["distances"])
            entries = self.cached_records(col, name, [rid for row in res["ids"] for rid in row])
            short: list[int] = []
            for qi, ids, dists in zip(pending, res["ids"], res["distances"]):
                row = []
                for rid, dist in zip(ids, dists):
                    entry = entries.get(rid)
                    if entry is None or (where is not None and not matches(entry.record, where)):
                        continue
                    row.append((float(dist), rid, entry.record, entry.vector))
                    if len(row) == k:
                        break
                exhausted = len(ids) < wide or (min_similarity is not None and 1.0 - dists[-1] < min_similarity)
                if len(row) < k and not exhausted:
                    short.append(qi)
                else:
                    merged[qi] += row
            pending = short
            if not pending:
                return
        res = col.query(query_embeddings=vectors[pending], n_results=k, include=["distances"], where=where)
        entries = self.cached_records(col, name, [rid for row in res["ids"] for rid in row])
        for qi, ids, dists in zip(pending, res["ids"], res["distances"]):
            merged[qi] += [
                (float(d), rid, entries[rid].record, entries[rid].vector)
                for rid, d in zip(ids, dists)
                if rid in entries
            ]

    def cached_records(self, col: Any, name: str, ids: list[str]) -> dict[str, CachedRecord]:
        """The records of `ids` in collection `name`, from the record cache, reading (and caching)
        the ones it lacks in one `get`; ids no longer stored are left out."""
        assert self.records is not None
        found, missing = self.records.get_many(ids)
        if missing:
            generation = self.records.generation
            fresh = self._read(col, name, missing)
            self.records.fill(fresh, generation)
            found.update(fresh)
        return found

    def _read(self, col: Any, name: str, ids: list[str]) -> dict[str, CachedRecord]:
        """The records of `ids` in collection `name` with their vectors, read from Chroma by id
        (ids no longer stored are left out)."""
        out: dict[str, CachedRecord] = {}
        for sl in self._chunks(len(ids)):
            got = col.get(ids=ids[sl], include=["metadatas", "embeddings"])
            for rid, meta, vec in zip(got["ids"], got["metadatas"], got["embeddings"]):
                out[rid] = CachedRecord(
                    from_chroma(meta), np.asarray(vec, dtype=np.float32), name, int(meta.get(self.jkey, -1))
                )
        return out

    def nearest_similarity(self, kind: str, family: str, embeddings: np.ndarray) -> list[float | None]:
        """For each vector, the highest cosine similarity to any stored record of `kind`/`family`."""
        best: list[float | None] = [None] * len(embeddings)
        if len(embeddings) == 0:
            return best
        for b in BUCKETS:
            col = self._for(kind, family, b)
            if col is None:
                continue
            res = col.query(
                query_embeddings=np.asarray(embeddings, dtype=np.float32), n_results=1, include=["distances"]
            )
            for i, dists in enumerate(res["distances"]):
                if dists:
                    sim = 1.0 - float(dists[0])
                    best[i] = sim if best[i] is None else max(best[i], sim)
        return best

    def dump(self, path: Path) -> int:
        """Write every record of this namespace, raw (ids, documents, metadata, embeddings), as JSONL."""
        n = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            for name in self.collection_names():
                col = self._collection(name, create=False)
                f.write(json.dumps({"collection": name, "metadata": col.metadata}) + "\n")
                offset = 0
                while True:
                    got = col.get(include=["metadatas", "documents", "embeddings"], limit=self.batch, offset=offset)
                    if not got["ids"]:
                        break
                    for i, rid in enumerate(got["ids"]):
                        emb = got["embeddings"][i]
                        f.write(
                            json.dumps(
                                {
                                    "collection": name,
                                    "id": rid,
                                    "document": got["documents"][i],
                                    "metadata": got["metadatas"][i],
                                    "embedding": [float(x) for x in emb] if emb is not None else None,
                                }
                            )
                            + "\n"
                        )
                        n += 1
                    offset += len(got["ids"])
        return n
