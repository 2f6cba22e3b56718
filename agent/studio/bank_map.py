"""A 2-D map of the bank: the stored embeddings of a sample of records projected by PCA
(scikit-learn), each point carrying what the map may be coloured by."""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from crl.agent.studio.listings import origin_of
from crl.memory.records import AnyRecord

COLOURS = ("outcome", "family", "source", "tier")
MAX_POINTS = 5000


def outcome_of(record: AnyRecord) -> str:
    """An episode's outcome, a step's episode outcome, or `rule`."""
    if record.kind == "episode":
        return record.outcome
    if record.kind == "step":
        return record.episode_outcome
    return "rule"


def project(vectors: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """Rows of `vectors` in 2-D by PCA, and the share of variance each axis explains.

    Fewer than 3 points cannot be fitted; they are laid on a line at 0.
    """
    if len(vectors) < 3:
        return np.zeros((len(vectors), 2)), [0.0, 0.0]
    from sklearn.decomposition import PCA

    pca = PCA(n_components=2, random_state=0)
    xy = pca.fit_transform(vectors)
    return xy, [float(v) for v in pca.explained_variance_ratio_]


def bank_map(bank: Any, records: list[AnyRecord], limit: int, seed: int = 0) -> dict[str, Any]:
    """Project a sample of at most `limit` of `records` (a listing) onto the plane of their embeddings.

    Args:
        bank: the open bank (its view reads the stored vectors of the sample only).
        records: the records to map (e.g. every episode matching the browser's filters).
        limit: the most points drawn; larger listings are sampled uniformly (with `seed`).
    """
    if not 1 <= limit <= MAX_POINTS:
        raise ValueError(f"limit must be between 1 and {MAX_POINTS}, not {limit}")
    sample = records if len(records) <= limit else random.Random(seed).sample(records, limit)
    located = bank.view.locate([r.id for r in sample])
    vectors = bank.view.embeddings_of(list(located.values()))
    kept = [r for r in sample if r.id in vectors]
    if not kept:
        return {"total": len(records), "sampled": 0, "explained": [0.0, 0.0], "points": []}
    xy, explained = project(np.stack([vectors[r.id] for r in kept]))
    points = [
        {
            "id": r.id,
            "x": round(float(x), 5),
            "y": round(float(y), 5),
            "outcome": outcome_of(r),
            "family": r.family,
            "source": origin_of(r),
            "tier": r.tier,
            "label": getattr(r, "goal", None) or getattr(r, "text", ""),
        }
        for r, (x, y) in zip(kept, xy)
    ]
    return {"total": len(records), "sampled": len(points), "explained": explained, "points": points}
