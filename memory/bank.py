"""The experience bank: the one object `crl run`, the retriever and `crl memory` talk to.

    bank = ExperienceBank(home / "memory", runs_dir=home / "runs", config=settings.memory)
    bank.sync()                       # ingest whatever earlier (or killed) runs logged
    runner = Runner(..., on_episode_end=bank.submit)   # ingestion off the hot path
    ...
    bank.close()                      # waits for queued episodes, releases the store

Data layout under the memory directory: `journal.jsonl` (+ `.lock`), `chroma/` (the embedded
view), `lock` (embedded-mode owner lock), `imports/` (copies of imported files, content
addressed), `backups/`, `view_state.json` (how far the view has applied the journal) and
`sync_state.json` (which run logs were already read; a cache, safe to delete). Those of a
namespace other than the home's first live in `namespaces/<namespace>/` (the Chroma folder and
the owner lock stay shared: `memory.storage.namespaces`).

In server mode a server that stops answering mid-run does not stop the run: episodes wait in
a backlog (they are in their run log) and credit is journalled first, both stored when the
server answers again (`memory.storage.outage`).

Every change goes the same way: under the journal lock, catch up on entries other processes
journalled but did not apply, append the new entries, apply them, advance the watermark.
Chroma is never the only copy of anything.
"""

from __future__ import annotations

import getpass
import json
import os
import queue
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from crl.memory import tags as tagging
from crl.memory.bank_curation import CurationMixin, as_list
from crl.memory.config import MemoryConfig
from crl.memory.ingest import compute_tags, episode_text, step_texts
from crl.memory.records import (
    KINDS,
    SCHEMA_VERSION,
    AnyRecord,
    EpisodeRecord,
    StepRecord,
    episode_record_id,
    family_problem,
    id_problem,
    parse_record_id,
)
from crl.memory.results import (
    REMOVED_SKIP,
    HistoryItem,
    IngestError,
    IngestResult,
    MemoryStats,
    RecordNotFoundError,
    SyncReport,
)
from crl.memory.storage.apply import ContentSource, Materializer, MissingContentError
from crl.memory.storage.embeddings import (  # SentenceTransformerEmbedding: tests patch its from_config here
    CachedEmbedding,
    CacheStats,
    SentenceTransformerEmbedding,  # noqa: F401
    TextEmbedder,
    embedding_from_config,
)
from crl.memory.storage.episode_log import read_episodes
from crl.memory.storage.journal import Journal, JournalEntry
from crl.memory.storage.journal_state import JournalState
from crl.memory.storage.keeper import ViewKeeper
from crl.memory.storage.locks import StoreLock
from crl.memory.storage.namespaces import belongs, namespace_dir, run_namespace
from crl.memory.storage.outage import Outage, ServerUnavailable
from crl.memory.storage.store import SEARCH_BUCKETS, SUCCESS_BUCKETS, ChromaView, Hit, buckets_for, connect
from crl.memory.trajectory import Episode

OUTCOME_BUCKETS = {None: SEARCH_BUCKETS, "success": SUCCESS_BUCKETS, "failure": ("fail",)}
SORTS = ("recency", "value", "use", "utility", "last_used")


def _dir_bytes(path: Path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total


def _outcome(record: AnyRecord) -> str:
    if isinstance(record, EpisodeRecord):
        return record.outcome
    return getattr(record, "episode_outcome", "")


class ExperienceBank(CurationMixin):
    """Episodes, steps and rules with value tags, on Chroma, rebuilt from append-only logs.

    Args:
        memory_dir: where the journal, locks and (embedded mode) the Chroma view live.
        runs_dir: the runs directory (`<home>/runs`); ingest entries point into its logs.
        config: the `memory` settings; `config.url` selects server mode.
        embedder: the embedding function (default: `embeddings.embedding_from_config`);
            the bank embeds through a `CachedEmbedding` of it (`config.embedding_cache_size`).
        actor: who the journal says made changes (default `user@host`).
        rebuild_on_model_change: re-embed everything when the store was embedded with a
            different model, instead of refusing to open it.
        lock: the embedded store's owner lock when this process already holds it (another
            namespace of the same home, opened beside a bank that holds it: `store_lock`);
            shared, and left held when this bank closes.

    Raises:
        StoreLockedError: another process owns this embedded store.
        NewerSchemaError: the store was written by a newer crl.
        StoreError: the server is unreachable, or the embedding model changed.
    """

    def __init__(
        self,
        memory_dir: str | Path,
        runs_dir: str | Path | None = None,
        config: MemoryConfig | None = None,
        *,
        embedder: TextEmbedder | None = None,
        actor: str | None = None,
        rebuild_on_model_change: bool = False,
        lock: StoreLock | None = None,
    ):
        self.config = config or MemoryConfig()
        self.root = Path(memory_dir)
        self.root.mkdir(parents=True, exist_ok=True)
        self.dir = self.root  # the namespace's own directory, once the store is reached (below)
        self.runs_dir = Path(runs_dir) if runs_dir is not None else None
        self.actor = actor or f"{getpass.getuser()}@{socket.gethostname()}"
        # one embedded Chroma folder holds every namespace of the home: the lock is on the home's memory
        self._borrowed_lock = lock is not None
        self._lock = None if self.config.server_mode else (lock or StoreLock(self.root, self.config.lock_timeout_s))
        self._client = None
        self._queue: queue.Queue | None = None
        self._worker: threading.Thread | None = None
        self._worker_errors: list[BaseException] = []
        self._closed = False
        self.outage: Outage | None = None
        self._backlog: list[tuple[Episode, str | None]] = []
        self._backlog_lock = threading.RLock()
        self.success_rates: dict[str, float] = {}  # last counted per family (`credit.family_success_rate`)
        try:
            self._client = connect(self.config, self.root / "chroma")
            self.dir = namespace_dir(self.root, self.namespace, legacy_owner=self._owns_legacy_view)
            self.dir.mkdir(parents=True, exist_ok=True)
            self.journal = Journal(
                self.dir / "journal.jsonl", self.config.fsync_journal, self.config.journal_lock_timeout_s
            )
            model = embedder or embedding_from_config(self.config)
            self.embedder: TextEmbedder = CachedEmbedding(model, self.config.embedding_cache_size)
            if self.config.server_mode:
                self.outage = Outage(
                    self._client.heartbeat, self.config.url, self.config.reconnect_base_s, self.config.reconnect_max_s
                )
            self.view = ChromaView(self._client, model, self.config, self.journal.journal_id)
            self.content = ContentSource(self.runs_dir, self.dir)
            materializer = Materializer(
                self.view, model, self.content, unneeded_of=_episode_unneeded if self.config.minimal_credit else None
            )
            self.keeper = ViewKeeper(self.dir, self.journal, self.view, materializer, self.mode)
            self.keeper.open(rebuild_on_model_change)
        except BaseException:
            self._release()
            raise

    def _owns_legacy_view(self) -> bool:
        """Whether the store holds a view of this namespace (so a memory directory from before
        namespaces, whose journal names none, is this namespace's)."""
        meta = f"{self.namespace}-meta"
        return any(getattr(c, "name", c) == meta for c in self._client.list_collections())

    @property
    def state(self) -> JournalState:
        """The journal folded: effective entries, what is ingested, what was removed."""
        return self.keeper.state

    @property
    def warnings(self) -> list[str]:
        """Things worth telling the user: a migration done, a run log missing at replay."""
        return self.keeper.warnings

    # ---- lifecycle ----------------------------------------------------------------------

    @property
    def namespace(self) -> str:
        """The namespace this bank reads and writes (`memory.namespace`); nothing crosses it."""
        return self.config.namespace

    @property
    def store_lock(self) -> StoreLock | None:
        """The embedded store's owner lock this bank holds (None in server mode), to open another
        namespace of the home in this process (`lock=`)."""
        return self._lock

    @property
    def primary(self) -> bool:
        """Whether this is the home's first namespace (its files at the top of the memory directory)."""
        return self.dir == self.root

    def check_run(self, run_id: str) -> None:
        """Refuse a run that learns into another namespace.

        Raises:
            ValueError: the run's `run.json` names another namespace.
        """
        recorded = run_namespace(self.runs_dir, run_id)
        if recorded is not None and recorded != self.namespace:
            raise ValueError(
                f"run {run_id} belongs to memory namespace {recorded!r}, not {self.namespace!r}; "
                f"pass --namespace {recorded} (or set CRL_MEMORY__NAMESPACE={recorded})"
            )

    @property
    def mode(self) -> str:
        """'embedded' or 'server <url>'."""
        return f"server {self.config.url}" if self.config.server_mode else "embedded"

    def _release(self) -> None:
        if self._client is not None:
            close = getattr(self._client, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:
                    pass
            self._client = None
        if self._lock is not None and not self._borrowed_lock:
            self._lock.release()

    def close(self) -> None:
        """Wait for queued episodes, then release the store. Raises `IngestError` if one failed.

        Episodes still waiting for a server that went down are retried with backoff for
        `memory.reconnect_wait_s`; what is still waiting then stays in the run logs (one
        warning line says so) for the next `sync`.
        """
        if self._closed:
            return
        try:
            self.flush()
            self._settle_backlog()
        finally:
            self._closed = True
            if self._queue is not None:
                self._queue.put(None)
                if self._worker is not None:
                    self._worker.join()
            self._release()

    def __enter__(self) -> "ExperienceBank":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- a server that stops answering -----------------------------------------------------

    @property
    def backlog(self) -> int:
        """Episodes logged but not yet stored because the server was unreachable."""
        return len(self._backlog)

    def available(self) -> bool:
        """Whether the store answers now. While a server is down this tries it again only when the
        backoff allows; when it answers, the backlog is stored first (in order)."""
        if self.outage is None or not self.outage.down:
            return True
        with self._backlog_lock:
            if not self.outage.probe():
                return False
            return self._drain()

    def server_failed(self, exc: BaseException) -> None:
        """Note that a call failed because the server is unreachable (the warning is printed once)."""
        if self.outage is None:
            raise exc
        self.outage.failed(exc, pending="the episodes it misses")

    def _drain(self) -> bool:
        """Store the backlog in order; True when it is empty (False: the server went away again)."""
        with self._backlog_lock:
            stored = 0
            while self._backlog:
                episode, actor = self._backlog[0]
                try:
                    self._ingest_now(episode, actor)
                except ServerUnavailable as e:
                    self.server_failed(e)
                    return False
                self._backlog.pop(0)
                stored += 1
            if self.outage is not None:
                self.outage.recovered(f"{stored} waiting episode(s)" if stored else "")
            return True

    def _settle_backlog(self) -> None:
        if self.outage is None or (not self._backlog and not self.outage.down):
            return
        wait = self.config.reconnect_wait_s
        deadline = time.monotonic() + wait
        while self._backlog and self.outage.wait(max(0.0, deadline - time.monotonic())):
            if self._drain() or time.monotonic() >= deadline:
                break
        if self._backlog:
            runs = sorted({e.run_id for e, _ in self._backlog})
            self.outage.say(
                f"warning: {len(self._backlog)} episode(s) of run {', '.join(runs)} are in the run log but not yet in "
                f"memory (the server {self.outage.url} is still unreachable after {wait:g}s of retries); "
                "`crl memory sync` stores them"
            )

    def _entry(self, op: str, ids: list[str], payload: dict[str, Any], actor: str | None) -> JournalEntry:
        return JournalEntry(op=op, ids=ids, payload=payload, actor=actor or self.actor)

    def _write(self, op: str, ids: list[str], payload: dict[str, Any], actor: str | None) -> JournalEntry:
        return self.keeper.write(self._entry(op, ids, payload, actor))

    # ---- ingestion ----------------------------------------------------------------------

    @staticmethod
    def _up_to_date(mark: Any, episode: Episode) -> bool:
        return mark is not None and mark.n_steps >= len(episode.steps) and (mark.finished or not episode.finished)

    def ingest_episode(self, episode: Episode, actor: str | None = None) -> IngestResult:
        """Store an episode and its steps with their tags; idempotent (only new steps are added).

        Novelty is computed against the bank before the insert. A finished episode that was
        stored unfinished (a killed run, later resumed) is completed in place. While the memory
        server is unreachable the episode waits in a backlog (it is in its run log) and is
        stored, in order, when the server answers again; the result says it was deferred.
        """
        problem = family_problem(episode.family) or id_problem("episode id", episode.episode_id)
        if problem:
            raise ValueError(f"episode {episode.episode_id!r} cannot be stored: {problem}")
        rid = episode_record_id(episode.family, episode.episode_id)
        self.check_run(episode.run_id)
        if self.outage is None:
            return self._ingest_now(episode, actor)
        with self._backlog_lock:
            if self._backlog or self.outage.down:
                if not self.available():
                    self._backlog.append((episode, actor))
                    return IngestResult(rid, 0, "deferred: the memory server is unreachable")
            try:
                return self._ingest_now(episode, actor)
            except ServerUnavailable as e:
                self.server_failed(e)
                self._backlog.append((episode, actor))
                return IngestResult(rid, 0, "deferred: the memory server is unreachable")

    def _ingest_now(self, episode: Episode, actor: str | None) -> IngestResult:
        rid = episode_record_id(episode.family, episode.episode_id)
        if not episode.steps and not episode.finished:
            return IngestResult(rid, 0, "no steps yet")
        if not self.state.may_sync(rid):
            return IngestResult(rid, 0, REMOVED_SKIP)
        if self._up_to_date(self.state.ingested.get(rid), episode):
            return IngestResult(rid, 0, "already stored")
        h = self.config.history_steps
        vectors = self.embedder.embed(step_texts(episode, h) + [episode_text(episode)])
        family, n = episode.family, len(episode.steps)
        with self.journal.locked():
            self.keeper.catch_up()
            if not self.state.may_sync(rid):
                return IngestResult(rid, 0, REMOVED_SKIP)
            mark = self.state.ingested.get(rid)
            if self._up_to_date(mark, episode):
                return IngestResult(rid, 0, "already stored")
            prior = min(mark.n_steps, n) if mark else 0
            earlier = (list(mark.novelty[:prior]) + [0.0] * prior)[:prior] if mark else []
            fresh = tagging.novelties(vectors[prior:n], self.view.nearest_similarity("step", family, vectors[prior:n]))
            t = compute_tags(episode, earlier + fresh, self.config.value_weights)
            payload: dict[str, Any] = {
                "episode_id": episode.episode_id,
                "run_id": episode.run_id,
                "family": family,
                "task": episode.task,
                "source": episode.source if episode.source in ("real", "synthetic") else "real",
                "n_steps": n,
                "finished": episode.finished,
                "prior": prior > 0,
                "history_steps": h,
                "novelty": t.novelty,
                "step_values": t.step_values,
                "value": t.value,
            }
            if episode.finished:
                payload["outcome"] = {k: v for k, v in episode.outcome().items() if k != "n_steps"}
            if rid in self.state.imported:
                payload["replaces_import"] = True  # the played episode takes the place of an imported copy
            log = self.content.log_ref(episode)
            if log is not None:
                payload["log"] = log
            else:
                payload["episode"] = episode.to_dict()
            by_id = {f"st:{family}:{episode.episode_id}:{i}": vectors[i] for i in range(n)}
            by_id[rid] = vectors[n]
            self.keeper.commit(
                [self._entry("ingest", [rid], payload, actor)], {0: {"episode": episode, "vectors": by_id}}
            )
        if self.config.auto_evict:
            self._auto_evict(family, actor)
        return IngestResult(rid, n - prior)

    def ingest_run_log(self, path: str | Path, actor: str | None = None) -> SyncReport:
        """Ingest every episode of one run log (finished or not); idempotent."""
        report = SyncReport(logs_read=1)
        for episode in read_episodes(path):
            try:
                result = self.ingest_episode(episode, actor)
            except (ValueError, MissingContentError) as e:
                report.errors.append(f"{path}: episode {episode.episode_id}: {e}")
                continue
            if result.skipped:
                report.episodes_skipped += 1
            else:
                report.episodes_ingested += 1
                report.steps_ingested += result.new_steps
        return report

    def sync(self, runs_dir: str | Path | None = None, actor: str | None = None) -> SyncReport:
        """Ingest what every run log under `runs_dir` holds and the bank does not (idempotent).

        Logs unchanged since the last sync (same size and mtime) are not re-read.
        """
        runs = Path(runs_dir) if runs_dir is not None else self.runs_dir
        if runs is None:
            raise ValueError("no runs directory: pass runs_dir to ExperienceBank or to sync()")
        cache_path = self.dir / "sync_state.json"
        try:
            cache = json.loads(cache_path.read_text())
            if cache.get("journal_id") != self.journal.journal_id:
                cache = {}
        except (OSError, ValueError):
            cache = {}
        logs: dict[str, list[int]] = dict(cache.get("logs", {}))
        total = SyncReport()
        for log in sorted(runs.glob("*/episodes.jsonl")):
            if not belongs(runs, log.parent.name, self.namespace, self.primary):
                continue
            st = log.stat()
            key, sig = str(log.resolve()), [st.st_size, st.st_mtime_ns]
            if logs.get(key) == sig:
                total.logs_unchanged += 1
                continue
            r = self.ingest_run_log(log, actor)
            total.logs_read += 1
            total.episodes_ingested += r.episodes_ingested
            total.steps_ingested += r.steps_ingested
            total.episodes_skipped += r.episodes_skipped
            total.errors += r.errors
            if not r.errors:
                logs[key] = sig
        tmp = cache_path.with_name(cache_path.name + f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"journal_id": self.journal.journal_id, "logs": logs}))
        os.replace(tmp, cache_path)
        return total

    def submit(self, episode: Episode) -> None:
        """Queue an episode for ingestion on a background thread (for the runner's episode-end hook)."""
        if self._closed:
            raise RuntimeError("the experience bank is closed")
        if self._queue is None:
            self._queue = queue.Queue()
            self._worker = threading.Thread(target=self._work, name="memory-ingest", daemon=True)
            self._worker.start()
        self._queue.put(Episode.from_dict(episode.to_dict()))  # a snapshot: the caller may go on mutating it

    def _work(self) -> None:
        assert self._queue is not None
        while True:
            episode = self._queue.get()
            try:
                if episode is None:
                    return
                self.ingest_episode(episode)
            except BaseException as e:  # surfaced by flush()/close(), never swallowed
                self._worker_errors.append(e)
            finally:
                self._queue.task_done()

    def flush(self) -> None:
        """Wait until every submitted episode is stored. Raises `IngestError` if any failed."""
        if self._queue is not None:
            self._queue.join()
        if self._worker_errors:
            errors, self._worker_errors = self._worker_errors, []
            raise IngestError(f"{len(errors)} episode(s) could not be stored: {errors[0]}") from errors[0]

    # ---- retrieval ----------------------------------------------------------------------

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Unit embeddings of `texts` with the bank's model (so a caller can time or reuse them).

        Served through the bank's embedding cache: a text embedded before (a retrieval query's
        state, later ingested) is not embedded again.
        """
        return self.embedder.embed(list(texts))

    def embedding_cache_stats(self) -> CacheStats | None:
        """Hits, misses and size of the embedding cache (None once `embedder` was replaced)."""
        return self.embedder.stats() if isinstance(self.embedder, CachedEmbedding) else None

    def _query(
        self,
        kind: str,
        family: str,
        texts: Sequence[str] | None,
        embeddings: np.ndarray | None,
        k: int,
        where_outcome: str | None,
        exclude_quarantine: bool,
        with_embeddings: bool = False,
        where: dict[str, Any] | None = None,
        min_similarity: float | None = None,
        verified_only: bool = False,
    ) -> list[list[Hit]]:
        if where_outcome not in OUTCOME_BUCKETS:
            raise ValueError(f"where_outcome must be 'success', 'failure' or None, not {where_outcome!r}")
        if embeddings is None:
            if texts is None:
                raise ValueError("pass texts or embeddings")
            embeddings = self.embed(texts)
        buckets = tuple(b for b in OUTCOME_BUCKETS[where_outcome] if not (verified_only and b == "u"))
        hits = self.view.query(kind, family, buckets, embeddings, k, with_embeddings, where, min_similarity)
        if not exclude_quarantine:
            extra = self.view.query(
                kind, family, ("q",), embeddings, k * 4 if where_outcome else k, with_embeddings, where, min_similarity
            )
            for row, more in zip(hits, extra):
                if where_outcome:
                    want = where_outcome == "success"
                    more = [h for h in more if (_outcome(h.record) == "success") == want]
                row.extend(more)
                row.sort(key=lambda h: (-h.similarity, h.id))
                del row[k:]
        return hits

    def query_steps(
        self,
        family: str,
        texts: Sequence[str] | None = None,
        k: int = 10,
        where_outcome: str | None = None,
        exclude_quarantine: bool = True,
        embeddings: np.ndarray | None = None,
        with_embeddings: bool = False,
        purpose: str | None = None,
        min_similarity: float | None = None,
        verified_only: bool = False,
    ) -> list[list[Hit]]:
        """The k stored steps nearest to each query state, batched: one list of hits per query.

        Args:
            family: task family to search (each family is its own set of collections).
            texts: query state texts (build them with `memory.records.state_text`).
            k: hits per query.
            where_outcome: 'success' or 'failure' to keep only steps of such episodes.
            exclude_quarantine: leave quarantined steps out (the default; retrieval must).
            embeddings: precomputed query vectors instead of `texts`.
            with_embeddings: each hit carries its stored vector (read by the same query).
            purpose: only steps that worked toward this sub-goal (`memory.purpose`).
            min_similarity: steps less similar are not wanted (a row may then hold fewer than k),
                which lets a purpose search stop early on a large bank.
            verified_only: leave out steps of episodes that claim a success nobody verified (their
                own bucket, `u`, is not searched at all).
        """
        where = {"purpose": purpose} if purpose else None
        return self._query(
            "step",
            family,
            texts,
            embeddings,
            k,
            where_outcome,
            exclude_quarantine,
            with_embeddings,
            where,
            min_similarity,
            verified_only,
        )

    def query_episodes(
        self,
        family: str,
        texts: Sequence[str] | None = None,
        k: int = 10,
        where_outcome: str | None = None,
        exclude_quarantine: bool = True,
        embeddings: np.ndarray | None = None,
        with_embeddings: bool = False,
        verified_only: bool = False,
    ) -> list[list[Hit]]:
        """The k stored episodes whose first state is nearest to each query (as `query_steps`)."""
        return self._query(
            "episode",
            family,
            texts,
            embeddings,
            k,
            where_outcome,
            exclude_quarantine,
            with_embeddings,
            verified_only=verified_only,
        )

    def search(
        self,
        text: str,
        k: int = 10,
        family: str | None = None,
        kinds: Sequence[str] = ("episode", "step"),
        include_quarantine: bool = False,
    ) -> list[Hit]:
        """Semantic search over episodes and steps of one or all families, best first."""
        vector = self.embed([text])
        hits: list[Hit] = []
        for kind in kinds:
            if kind == "rule":
                hits += self.query_rules([text], k=k, scope=family)[0]
                continue
            for fam in [family] if family else self.view.families(kind):
                hits += self._query(kind, fam, None, vector, k, None, not include_quarantine)[0]
        hits.sort(key=lambda h: (-h.similarity, h.id))
        return hits[:k]

    # ---- reading ------------------------------------------------------------------------

    def resolve(self, ref: str) -> str:
        """A record id from an id, a bare episode id, or a unique prefix of either.

        Raises:
            RecordNotFoundError: nothing matches, or the prefix is ambiguous.
        """
        ref = ref.strip()
        try:
            parse_record_id(ref)
            return ref
        except ValueError:
            pass
        self.keeper.refresh()
        ids = self.state.episode_record_ids
        if ref in ids:
            return ids[ref]
        matches = sorted({rid for eid, rid in ids.items() if eid.startswith(ref) or rid.startswith(ref)})
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise RecordNotFoundError(f"no memory record {ref!r}; see `crl memory ls`")
        raise RecordNotFoundError(
            f"{ref!r} matches {len(matches)} records ({', '.join(matches[:5])}, ...); give more of the id"
        )

    def get(self, ref: str) -> AnyRecord:
        """One record, in full (an episode with its trajectory).

        Raises:
            RecordNotFoundError: no such record in the bank.
        """
        rid = self.resolve(ref)
        found = self.view.locate([rid], documents=True).get(rid)
        if found is None:
            raise RecordNotFoundError(f"no memory record {rid!r} (removed or never stored); see `crl memory ls`")
        return found.record

    def ls(
        self,
        kind: str = "episode",
        family: str | None = None,
        variant: str | None = None,
        outcome: str | None = None,
        tier: str | None = None,
        source: str | None = None,
        skill: str | None = None,
        tag: str | None = None,
        sort: str = "recency",
        limit: int | None = None,
    ) -> list[AnyRecord]:
        """Records matching every filter given, sorted (newest, highest value, most used... first).

        Episodes come without their trajectory (use `get` for that).

        Args:
            kind: 'episode', 'step' or 'rule'.
            outcome: 'success', 'failure' or 'unfinished'.
            tier: 'golden', 'regular' or 'quarantine'.
            sort: one of recency, value, use, utility, last_used.
        """
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {', '.join(KINDS)}")
        if sort not in SORTS:
            raise ValueError(f"sort must be one of {', '.join(SORTS)}")
        buckets = buckets_for(tier, outcome)
        families = [family] if family and kind != "rule" else None
        out: list[AnyRecord] = []
        for record, _ in self.view.scan(kind, families, buckets):
            if family and record.family != family:
                continue
            if tier and record.tier != tier:
                continue
            if source and record.source != source:
                continue
            if tag and tag not in record.tags:
                continue
            if isinstance(record, EpisodeRecord | StepRecord):
                rec_outcome = record.outcome if isinstance(record, EpisodeRecord) else record.episode_outcome
                if outcome and rec_outcome != outcome:
                    continue
                if variant and record.variant != variant:
                    continue
                if skill and skill not in record.skills:
                    continue
            elif variant or skill or outcome:
                continue
            out.append(record)
        key = {
            "recency": lambda r: r.created_at,
            "value": lambda r: r.value,
            "use": lambda r: r.use_count,
            "utility": lambda r: r.utility,
            "last_used": lambda r: r.last_used_at or 0.0,
        }[sort]
        out.sort(key=lambda r: (key(r), r.id), reverse=True)
        return out[:limit] if limit is not None else out

    def history(self, ref: str) -> list[HistoryItem]:
        """Every journal entry that touched a record (a step: also its episode), oldest first."""
        rid = self.resolve(ref)
        targets = {rid}
        kind, family, rest = parse_record_id(rid)
        if kind == "step":
            targets.add(episode_record_id(family, rest.rsplit(":", 1)[0]))
        self.keeper.refresh()
        effective = {e.seq for e in self.state.entries}
        entries, _, _ = self.journal.read_numbered(0, skipped=[])  # a corrupt line: skipped (open warned)
        return [HistoryItem(e, e.seq not in effective) for e in entries if targets.intersection(e.ids)]

    def stats(self) -> MemoryStats:
        """Counts by family, tier, outcome, source and skill; value histogram; disk use."""
        episodes = [r for r, _ in self.view.scan("episode")]
        hist = (
            np.histogram(np.clip([e.value for e in episodes], 0, 1), bins=10, range=(0.0, 1.0))[0]
            if episodes
            else np.zeros(10, int)
        )
        steps_by_family = {f: self.view.count("step", f) for f in self.view.families("step")}
        meta = self.view.meta() or {}
        return MemoryStats(
            episodes=len(episodes),
            steps=sum(steps_by_family.values()),
            rules=sum(1 for _ in self.view.scan("rule")),
            by_family=dict(Counter(e.family for e in episodes)),
            by_tier=dict(Counter(e.tier for e in episodes)),
            by_outcome=dict(Counter(e.outcome for e in episodes)),
            by_source=dict(Counter(e.source for e in episodes)),
            by_skill=dict(Counter(s for e in episodes for s in e.skills)),
            steps_by_family=steps_by_family,
            value_histogram=[(i / 10, (i + 1) / 10, int(c)) for i, c in enumerate(hist)],
            journal_entries=len(self.state.entries),
            disk_bytes=_dir_bytes(self.dir),
            mode=self.mode,
            embedding=str(meta.get("embedding", self.embedder.identity)),
            schema_version=int(meta.get("schema_version", SCHEMA_VERSION)),
        )

    def _resolve_all(self, ids: str | Iterable[str]) -> list[str]:
        """The record ids that `ids` name, each of which must be stored (a well-formed id of no record
        is refused before anything is journalled)."""
        resolved = list(dict.fromkeys(self.resolve(i) for i in as_list(ids)))
        if not resolved:
            raise ValueError("no record ids given")
        found = self.view.locate(resolved)
        missing = [rid for rid in resolved if rid not in found]
        if missing:
            raise RecordNotFoundError(f"no memory record {', '.join(map(repr, missing))}; see `crl memory ls`")
        return resolved


def _episode_unneeded(episode: Episode) -> set[int]:
    """`memory.synthesis.minimal.episode_unneeded`, imported when a bank with `minimal_credit` stores an episode."""
    from crl.memory.synthesis.minimal import episode_unneeded

    return episode_unneeded(episode)
