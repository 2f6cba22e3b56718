"""How alike two observation texts are, for matching where one segment ends to where the next starts.

Two are offered (`synthesis.similarity`): `lexical`, the default (no model, so tests and CPU-only
runs need none, and it tells worlds apart better on the measurement below), and `embedding`, the
cosine of the bank's sentence embeddings (`embedding_similarity`). Each has its own measured
threshold; `similarity_named` gives a name's function and threshold.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Literal, get_args

import numpy as np

Similarity = Callable[[str, str], float]
SimilarityName = Literal["lexical", "embedding"]
SIMILARITIES: tuple[str, ...] = get_args(SimilarityName)

LEXICAL_THRESHOLD = 0.6
"""Segments from another world are matched only at this lexical similarity or above.

Measured on keyroom (`n_rooms=3`, 2 distractors): two observations of the same room of the same
world in different states score 0.74 on average (5th percentile 0.63, least 0.56, 610 pairs
from seeds 0-99), while the start observations of two different worlds score 0.50 on average
and 0.6 or more in 17% of pairs (0.7 or more in 2%; 7140 pairs from seeds 0-119). Word overlap
alone cannot tell worlds apart well; the threshold keeps most same-place matches, and replay
validation rejects the cross-world matches that do not play (their actions name other objects).
`python -m bench.stitch_similarity` measures it again with full observations along the solver's
path (945 same-place pairs, seeds 0-99): same place mean 0.74, 5th percentile 0.65; at 0.6 it keeps
99.8% of them and lets 17% of other-world pairs through; AUC 0.966.
"""

EMBEDDING_THRESHOLD = 0.75
"""Segments from another world are matched only at this embedding cosine or above.

Measured by `python -m bench.stitch_similarity` with the default embedding model
(all-MiniLM-L6-v2) on the same pairs as `LEXICAL_THRESHOLD`: same place mean 0.87, 5th percentile
0.78, least 0.67 (945 pairs); other worlds' starts mean 0.71, 95th percentile 0.85 (7140 pairs).
0.75 keeps 98.2% of same-place pairs and lets 32.8% of other-world pairs through (0.8: 90.7% and
15.6%). The embedding separates the two less well than word overlap (AUC 0.942 against 0.966):
keyroom worlds share their phrasing and differ in names, which a sentence embedding discounts.
"""

_WORD = re.compile(r"[a-z0-9]+")


def words(text: str) -> set[str]:
    """The lower-case words of `text`."""
    return set(_WORD.findall(text.lower()))


def lexical_similarity(a: str, b: str) -> float:
    """The Jaccard similarity of the two texts' word sets, in [0, 1] (1 for two empty texts).

    Example:
        >>> lexical_similarity("You are in the hall.", "You are in the kitchen.")
        0.6666666666666666
    """
    wa, wb = words(a), words(b)
    if not wa and not wb:
        return 1.0
    return len(wa & wb) / len(wa | wb)


def embedding_similarity(embed: Callable[[Sequence[str]], np.ndarray]) -> Similarity:
    """A similarity from an embedding function (texts -> rows of vectors): the cosine of the two
    texts' embeddings, each text embedded once. Pass it a threshold of its own when stitching
    (`LEXICAL_THRESHOLD` is for the lexical default)."""
    cache: dict[str, np.ndarray] = {}

    def vector(text: str) -> np.ndarray:
        if text not in cache:
            v = np.asarray(embed([text])[0], dtype=float)
            norm = float(np.linalg.norm(v))
            cache[text] = v / norm if norm else v
        return cache[text]

    def similarity(a: str, b: str) -> float:
        return float(vector(a) @ vector(b))

    return similarity


def similarity_named(name: str, embed: Callable[[Sequence[str]], np.ndarray] | None = None) -> tuple[Similarity, float]:
    """The similarity `name` ("lexical" or "embedding") and its measured default threshold.

    Raises:
        ValueError: an unknown name, or "embedding" without an embedding function.

    Example:
        >>> similarity_named("lexical")[1]
        0.6
    """
    if name == "lexical":
        return lexical_similarity, LEXICAL_THRESHOLD
    if name == "embedding":
        if embed is None:
            raise ValueError("the embedding similarity needs an embedding function (the bank's `embed`)")
        return embedding_similarity(embed), EMBEDDING_THRESHOLD
    raise ValueError(f"unknown similarity {name!r}: choose one of {', '.join(SIMILARITIES)}")
