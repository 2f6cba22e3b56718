"""The drift monitor: has synthetic experience moved away from recent real experience?

Per task family, two samples of stored step embeddings (steps, not episodes: an episode is
embedded by its first state only, which a stitched or relabelled episode shares with real
play; its steps are where synthesis can wander off):

    real       the steps of the newest real episodes, up to `max_samples`
    synthetic  the steps of the newest synthetic episodes (`source="synthetic"`), up to `max_samples`

Quarantined records are left out. The statistic is the unbiased squared maximum mean
discrepancy (Gretton et al. 2012) with an RBF kernel,

    k(a, b) = exp(-||a - b||^2 / (2 sigma^2)),   sigma = median pairwise distance of the pooled sample

    MMD^2 = mean_{i != j} k(x_i, x_j) + mean_{i != j} k(y_i, y_j) - 2 mean_{i, j} k(x_i, y_j)

and its p-value comes from a permutation test: the pooled sample is relabelled at random
`permutations` times, p = (1 + #{permuted MMD^2 >= observed}) / (permutations + 1).
Drift fires when p <= `p_value` and MMD^2 >= `min_mmd2` (settings in `memory.drift`), and
only when each side holds at least `min_samples` steps. Subsampling and permutations draw
from one seeded generator, so the same data gets the same verdict.

While a family has drifted, its synthetic records count `drifted_synthetic_weight` times
(else `synthetic_weight` times): the retriever multiplies their rerank score and their
episodic-control votes by it, and dataset builders read it from `synthetic_weight(bank,
family)`. Verdicts are cached per bank and family and recomputed when the family's number
of searchable steps changes, so retrieval does not test on every call.

    >>> rng = np.random.default_rng(0)
    >>> same = mmd_test(rng.normal(size=(100, 4)), rng.normal(size=(100, 4)), seed=0)
    >>> shifted = mmd_test(rng.normal(size=(100, 4)), rng.normal(1.0, size=(100, 4)), seed=0)
    >>> same.p_value > 0.05, shifted.p_value < 0.01
    (True, True)
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from crl.memory.config import DriftConfig
from crl.memory.records import parse_record_id, step_record_id
from crl.memory.storage.store import SEARCH_BUCKETS

if TYPE_CHECKING:
    from crl.memory.bank import ExperienceBank

SOURCES = ("real", "synthetic")


@dataclass(frozen=True)
class MMDTest:
    """A two-sample MMD test: the statistic, its permutation p-value and what it compared."""

    mmd2: float
    p_value: float
    bandwidth: float
    n_x: int
    n_y: int


@dataclass(frozen=True)
class DriftResult:
    """One family's verdict.

    Attributes:
        family: the task family.
        n_real / n_synthetic: step embeddings compared on each side (after subsampling).
        mmd2: the unbiased MMD^2, None when there was no test.
        p_value: its permutation p-value, None when there was no test.
        p_threshold / min_mmd2: the thresholds drift was judged by.
        drifted: whether drift fired.
        weight: the factor synthetic records of this family get now.
        note: why there was no test, if there was none.
    """

    family: str
    n_real: int
    n_synthetic: int
    mmd2: float | None
    p_value: float | None
    p_threshold: float
    min_mmd2: float
    drifted: bool
    weight: float
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The verdict, JSON-ready."""
        return asdict(self)

    def describe(self) -> str:
        """One line for people, e.g. "keyroom: drifted (MMD^2 0.120, p 0.005): synthetic ×0.25"."""
        if self.mmd2 is None or self.p_value is None:
            return f"{self.family}: {self.note}; synthetic ×{self.weight:g}"
        numbers = (
            f"MMD^2 {self.mmd2:.3f}, p {self.p_value:.3f}; {self.n_synthetic} synthetic vs {self.n_real} real steps"
        )
        if self.drifted:
            return f"{self.family}: DRIFTED ({numbers}): synthetic experience down-weighted ×{self.weight:g}"
        return f"{self.family}: no drift ({numbers}); synthetic ×{self.weight:g}"


def rbf_bandwidth(squared_distances: np.ndarray) -> float:
    """The median heuristic: the median pairwise distance (off the diagonal); 1 when all points coincide."""
    n = len(squared_distances)
    off = squared_distances[np.triu_indices(n, 1)]
    median = float(np.median(off)) if off.size else 0.0
    return float(np.sqrt(median)) if median > 0 else 1.0


def _squared_distances(z: np.ndarray) -> np.ndarray:
    sq = np.einsum("ij,ij->i", z, z)
    return np.maximum(sq[:, None] + sq[None, :] - 2.0 * (z @ z.T), 0.0)


def _subsample(x: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    if len(x) <= k:
        return x
    return x[np.sort(rng.choice(len(x), size=k, replace=False))]


def _mmd2_columns(kernel: np.ndarray, labels: np.ndarray, m: int) -> np.ndarray:
    """Unbiased MMD^2 for each column of 0/1 labels (1: first sample, `m` of them), kernel diagonal zeroed."""
    n = len(kernel) - m
    row_sums = kernel.sum(axis=1)
    total = row_sums.sum()
    xx = np.einsum("ij,ij->j", labels, kernel @ labels)
    x_rows = row_sums @ labels
    xy = x_rows - xx
    yy = total - 2.0 * x_rows + xx
    return xx / (m * (m - 1)) + yy / (n * (n - 1)) - 2.0 * xy / (m * n)


def mmd_test(
    x: np.ndarray, y: np.ndarray, *, permutations: int = 200, seed: int = 0, max_samples: int | None = None
) -> MMDTest:
    """Unbiased MMD^2 of samples `x` and `y` (rows) under an RBF kernel, with a permutation p-value.

    Args:
        x, y: samples, one vector per row, at least 2 rows each.
        permutations: random relabellings of the pooled sample.
        seed: seeds subsampling and permutations.
        max_samples: each side is subsampled (without replacement) to at most this many rows.

    Raises:
        ValueError: a side has fewer than 2 rows, or the dimensions differ.
    """
    rng = np.random.default_rng(seed)
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(x) < 2 or len(y) < 2 or x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"mmd_test needs two samples of >= 2 rows of one dimension, got {x.shape} and {y.shape}")
    if max_samples is not None:
        x, y = _subsample(x, max_samples, rng), _subsample(y, max_samples, rng)
    m, n = len(x), len(y)
    d2 = _squared_distances(np.vstack([x, y]))
    sigma = rbf_bandwidth(d2)
    kernel = np.exp(-d2 / (2.0 * sigma * sigma))
    np.fill_diagonal(kernel, 0.0)
    labels = np.zeros((m + n, permutations + 1))
    labels[:m, 0] = 1.0
    for p in range(1, permutations + 1):
        labels[rng.permutation(m + n)[:m], p] = 1.0
    stats = _mmd2_columns(kernel, labels, m)
    observed = float(stats[0])
    exceed = int(np.sum(stats[1:] >= observed - 1e-12))
    return MMDTest(observed, (1 + exceed) / (permutations + 1), sigma, m, n)


# ---- the bank's samples -----------------------------------------------------------------


def recent_step_ids(bank: ExperienceBank, family: str, max_steps: int) -> dict[str, list[str]]:
    """Ids of the steps of the newest real and the newest synthetic episodes of `family`, newest
    episodes first, at most `max_steps` per source, read from the journal (no store scan).

    Imported episodes carry no source in their journal entry; their stored records are read for it.
    """
    bank.keeper.refresh()
    state = bank.state
    picked: dict[str, list[str]] = {s: [] for s in SOURCES}
    seen: set[str] = set()

    def take(source: str, episode_id: str, n_steps: int) -> None:
        room = max_steps - len(picked[source])
        picked[source].extend(step_record_id(family, episode_id, i) for i in range(min(n_steps, room)))

    for entry in reversed(state.entries):
        if all(len(ids) >= max_steps for ids in picked.values()):
            break
        if entry.op == "ingest" and entry.payload.get("family") == family:
            rid = entry.ids[0]
            if rid in seen or rid in state.removed:
                continue
            seen.add(rid)
            source = entry.payload.get("source", "real")
            take(source if source in SOURCES else "real", entry.payload["episode_id"], int(entry.payload["n_steps"]))
        elif entry.op == "import":
            mine = {
                rid: int(n_steps)
                for rid, (n_steps, *_) in entry.payload.get("episodes", {}).items()
                if parse_record_id(rid)[1] == family and rid not in seen and rid not in state.removed
            }
            seen.update(mine)
            stored = bank.view.locate(list(mine))
            for rid, n_steps in mine.items():
                if rid in stored:
                    take(stored[rid].record.source, rid.split(":", 2)[2], n_steps)
    return picked


def family_samples(bank: ExperienceBank, family: str, max_steps: int) -> dict[str, np.ndarray]:
    """The stored embeddings of `recent_step_ids`, quarantined steps left out, by source."""
    out: dict[str, np.ndarray] = {}
    for source, ids in recent_step_ids(bank, family, max_steps).items():
        located = [loc for loc in bank.view.locate(ids).values() if loc.record.tier != "quarantine"]
        vectors = bank.view.embeddings_of(located) if located else {}
        rows = [vectors[i] for i in ids if i in vectors]
        out[source] = np.stack(rows) if rows else np.zeros((0, 0), dtype=np.float32)
    return out


def measure_drift(bank: ExperienceBank, family: str, config: DriftConfig | None = None) -> DriftResult:
    """Test `family`'s synthetic steps against its recent real ones now (no cache)."""
    cfg = config or bank.config.drift
    samples = family_samples(bank, family, cfg.max_samples)
    n_real, n_syn = len(samples["real"]), len(samples["synthetic"])

    def verdict(note: str = "", test: MMDTest | None = None) -> DriftResult:
        drifted = test is not None and test.p_value <= cfg.p_value and test.mmd2 >= cfg.min_mmd2
        return DriftResult(
            family,
            n_real,
            n_syn,
            None if test is None else round(test.mmd2, 6),
            None if test is None else round(test.p_value, 6),
            cfg.p_value,
            cfg.min_mmd2,
            drifted,
            cfg.drifted_synthetic_weight if drifted else cfg.synthetic_weight,
            note,
        )

    if not cfg.enabled:
        return verdict("drift monitor off (memory.drift.enabled)")
    if n_syn == 0:
        return verdict("no synthetic experience")
    if n_real < cfg.min_samples or n_syn < cfg.min_samples:
        return verdict(f"too few steps to test ({n_syn} synthetic, {n_real} real; needs {cfg.min_samples} each)")
    test = mmd_test(samples["real"], samples["synthetic"], permutations=cfg.permutations, seed=cfg.seed)
    return verdict(test=test)


# ---- cached verdicts ----------------------------------------------------------------------

_cache: weakref.WeakKeyDictionary[Any, dict[str, tuple[int, DriftResult]]] = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def _searchable_steps(bank: ExperienceBank, family: str) -> int:
    return bank.view.count("step", family, SEARCH_BUCKETS)


def family_drift(bank: ExperienceBank, family: str, refresh: bool = False) -> DriftResult:
    """`family`'s verdict, cached per bank until its number of searchable steps changes (or `refresh`)."""
    size = _searchable_steps(bank, family)
    with _cache_lock:
        cached = _cache.get(bank, {}).get(family)
    if cached is not None and cached[0] == size and not refresh:
        return cached[1]
    result = measure_drift(bank, family)
    with _cache_lock:
        _cache.setdefault(bank, {})[family] = (size, result)
    return result


def drift_report(bank: ExperienceBank, refresh: bool = True) -> list[DriftResult]:
    """Every family's verdict (families with stored steps), by family name."""
    return [family_drift(bank, family, refresh) for family in bank.view.families("step")]


def synthetic_weight(bank: ExperienceBank, family: str) -> float:
    """The factor synthetic records of `family` count with now: `memory.drift.drifted_synthetic_weight`
    while the family has drifted, else `memory.drift.synthetic_weight` (for retrieval and datasets).

    Cached: the test reruns only when the family's number of searchable steps has changed.
    """
    cfg = bank.config.drift
    if not cfg.enabled:
        return cfg.synthetic_weight
    return family_drift(bank, family).weight
