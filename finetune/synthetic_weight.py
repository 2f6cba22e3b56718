"""Synthetic experience weighs less than real experience in a dataset (`synthetic_weight`, w).

TRL's SFTTrainer has no per-example loss weight, so the project realises weights as rows
(soft targets duplicate rows within a state). Between real and synthetic examples the weight
is realised as a share instead: of the n synthetic examples, round(w x n) are kept and the
rest left out, so a synthetic example weighs w in expectation against a real example's 1.
Duplicating each real row 1/w times would say the same, but would multiply the dataset and
its epochs (10x at w = 0.1), and w changes continuously once the drift monitor scales it.

Which synthetic examples stay is decided by a stable hash of their keys (step ids): a rebuild
of the same bank keeps the same ones, and a larger w keeps a superset of a smaller one's.

Example:
    >>> kept, share = weigh_synthetic([None, "st:a:1", "st:a:2", None, "st:a:3", "st:a:4"], 0.5)
    >>> [i for i in kept if i in (0, 3)], share.kept
    ([0, 3], 2)
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

SCHEME = "share: round(w x n) of the n synthetic examples kept (lowest stable hash of their step ids), none duplicated"


@dataclass(frozen=True)
class SyntheticShare:
    """How synthetic examples were weighed.

    Attributes:
        weight: the weight applied (config's `synthetic_weight` or a caller's override).
        synthetic: synthetic examples before weighing.
        kept: synthetic examples kept.
        real: real examples (all kept).
    """

    weight: float
    synthetic: int
    kept: int
    real: int

    def to_dict(self) -> dict[str, Any]:
        """The card's form, with the scheme in words."""
        return asdict(self) | {"scheme": SCHEME}


def _rank(key: str) -> str:
    return hashlib.sha1(key.encode()).hexdigest()


def weigh_synthetic(keys: Sequence[str | None], weight: float) -> tuple[list[int], SyntheticShare]:
    """Indices of the examples to keep, in order, and what was done.

    Args:
        keys: per example, a stable key when it is synthetic (its step id), None when it is real.
        weight: the synthetic weight w in [0, 1].

    Raises:
        ValueError: the weight is outside [0, 1].
    """
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"synthetic_weight must be between 0 and 1, not {weight}")
    synthetic = [i for i, k in enumerate(keys) if k is not None]
    quota = math.floor(weight * len(synthetic) + 0.5)
    chosen = set(sorted(synthetic, key=lambda i: (_rank(keys[i]), i))[:quota])
    kept = [i for i, k in enumerate(keys) if k is None or i in chosen]
    share = SyntheticShare(round(weight, 6), len(synthetic), len(chosen), len(keys) - len(synthetic))
    return kept, share
