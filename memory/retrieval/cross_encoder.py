"""Optional cross-encoder relevance for the reranker (`rerank = "cross-encoder"`).

A cross-encoder reads the query state and a memory's text together and scores their
relevance; it is slower than the bi-encoder (one forward pass per pair) and more precise,
so it scores only the `cross_encoder_pool` candidates nearest by embedding. Any object with
`predict(pairs) -> scores in [0, 1]` will do; a sentence-transformers `CrossEncoder` gets
a sigmoid on its logits.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from crl.memory.errors import BankError
from crl.memory.records import AnyRecord, StepRecord


class CrossEncoderError(BankError, RuntimeError):
    """The cross-encoder could not be loaded; the message says what to set."""


@runtime_checkable
class PairScorer(Protocol):
    """Scores (query, document) pairs."""

    def predict(self, pairs: list[tuple[str, str]]) -> Sequence[float]:
        """Relevance of each pair, in [0, 1] (higher is more relevant)."""
        ...


def load_cross_encoder(name: str, device: str = "cpu") -> Any:
    """A sentence-transformers `CrossEncoder` from a local folder (or a model already cached).

    Raises:
        CrossEncoderError: nothing loadable there.
    """
    path = Path(name).expanduser()
    try:
        from sentence_transformers import CrossEncoder

        return CrossEncoder(str(path) if path.exists() else name, device=device, local_files_only=True)
    except Exception as e:
        raise CrossEncoderError(
            f"could not load the cross-encoder {name!r} ({e}). Set retrieval.cross_encoder_model to a local "
            "sentence-transformers CrossEncoder folder, or use rerank = 'default'"
        ) from e


def document_of(record: AnyRecord) -> str:
    """The text a memory is judged by: its state text, plus the action taken for a step."""
    if isinstance(record, StepRecord):
        return f"{record.text}\nAction: {record.action}"
    return record.text


def relevance(scorer: Any, pairs: list[tuple[str, str]]) -> np.ndarray:
    """Scores of `pairs` in [0, 1], one batched call."""
    if not pairs:
        return np.zeros(0, dtype=np.float32)
    st = sys.modules.get("sentence_transformers")  # not imported means scorer is no CrossEncoder
    if st is not None and isinstance(scorer, st.CrossEncoder):
        import torch

        raw = scorer.predict(pairs, activation_fn=torch.nn.Sigmoid(), show_progress_bar=False, convert_to_numpy=True)
    else:
        raw = scorer.predict(pairs)
    return np.clip(np.asarray(raw, dtype=np.float32).reshape(-1), 0.0, 1.0)
