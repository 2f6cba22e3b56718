"""How alike two observation texts are, for matching where one segment ends to where the next starts.

The default is lexical (no model, so tests and CPU-only runs need none); an embedding function
can stand in for it through `embedding_similarity`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np

Similarity = Callable[[str, str], float]

LEXICAL_THRESHOLD = 0.6
"""Segments from another world are matched only at this lexical similarity or above.

Measured on keyroom (`n_rooms=3`, 2 distractors): two observations of the same room of the same
world in different states score 0.74 on average (5th percentile 0.63, least 0.56, 610 pairs
from seeds 0-99), while the start observations of two different worlds score 0.50 on average
and 0.6 or more in 17% of pairs (0.7 or more in 2%; 7140 pairs from seeds 0-119). Word overlap
alone cannot tell worlds apart well; the threshold keeps most same-place matches, and replay
validation rejects the cross-world matches that do not play (their actions name other objects).
An embedding similarity needs a threshold measured for it.
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
