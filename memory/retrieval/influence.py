"""Influence limits on memory's votes: verified successes only, a cap per source, outliers down-weighted.

A few records claiming success for an action move episodic control's values directly
(`memory.retrieval.episodic_control`), so who wrote a record matters as much as what it says.
Three defences act on the votes of the nearest stored steps, each switchable in
`settings.retrieval` (and all at once with `retrieval.defences = false`):

    verified_only     a stored step whose episode claims success without the environment having
                      verified it (`counts_as_success` is false: an import, a forged record) does
                      not vote; an unverified failure still votes (it can only lower a value, and
                      the cap below bounds it).
    max_source_share  the votes behind one action are grouped by source (`source_of`: each
                      verified episode is its own source, the environment vouched for it; an
                      unverified record's source is its import, else its run); no unverified
                      group may hold more than the share s of the action's support, the prior
                      pseudo-support `ec_prior_weight` counted as one more, independent group.
                      Groups over the cap are scaled down to it (`cap_shares`, a water-filling:
                      the cap is taken of the capped total). One import holding all the votes
                      for an action thus keeps at most s * c / (1 - s) of support: 0.52 with
                      s = 0.34 and c = 1, below the mixed policy's override threshold
                      (`mixed_min_support`, 1.5). Verified episodes are not capped: each is a fact
                      the environment checked, and capping them would shrink every thin but true
                      value (one episode is always more than a third of one vote plus the prior).
    outlier_weight    an unverified vote is an outlier when verified votes for the same action
                      from near-identical states (similarity >= `outlier_similarity`) disagree
                      with its return by more than `outlier_tolerance` (a value replay disagrees
                      with), or when it claims success and no verified success of any action lies
                      within `outlier_similarity` of it (claimed success far from every verified
                      one). Its weight is multiplied by `outlier_weight` and it is counted in
                      `ActionValue.outliers`.

What these cannot stop: an attacker who plays real episodes (they are verified) only moves values
by what really happened; one who can write records marked verified straight into the store is
stopped only by the cap and the outlier check, and not at all where it controls most sources.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from crl.memory.records import EpisodeRecord, StepRecord

try:  # the records' own rule, where this crl has it
    from crl.memory.records import counts_as_success as _records_counts_as_success
except ImportError:  # pragma: no cover - older records module
    _records_counts_as_success = None


def is_verified(record) -> bool:
    """Whether the environment verified this record's outcome: its `verified` flag, unless only a
    curator vouched for it (`verified_by` 'curator:WHO': trusted, but not checked by the
    environment, so still capped and checked for outliers). A record without the flag (older
    records module) counts as verified when played (`real`) or synthetic (validated by replay)."""
    flag = getattr(record, "verified", None)
    if flag is None:
        return getattr(record, "source", "real") in ("real", "synthetic")
    by = getattr(record, "verified_by", None) or ""
    return bool(flag) and not by.startswith("curator")


def claims_success(record) -> bool:
    """Whether the record says its episode succeeded (verified or not)."""
    if isinstance(record, StepRecord):
        return record.episode_outcome == "success"
    if isinstance(record, EpisodeRecord):
        return bool(record.success)
    return bool(getattr(record, "success", False))


def counts_as_success(record) -> bool:
    """An environment-verified success (`memory.records.counts_as_success` where it exists)."""
    if _records_counts_as_success is not None:
        return bool(_records_counts_as_success(record))
    return claims_success(record) and is_verified(record)


def source_of(record) -> str:
    """Who stands behind a record's vote: `episode:<id>` for a verified record (the environment
    vouched for each episode), else `import:<id>` for an imported one, else `run:<run id>`."""
    if is_verified(record) and getattr(record, "episode_id", None):
        return f"episode:{record.episode_id}"
    for name in ("import_id", "imported_from", "import_file"):
        value = getattr(record, name, None)
        if value:
            return f"import:{value}"
    return f"run:{getattr(record, 'run_id', '') or '?'}"


def cap_shares(
    weights: dict[str, float],
    share: float,
    prior: float = 0.0,
    exempt: frozenset[str] | set[str] = frozenset(),
    rounds: int = 64,
) -> dict[str, float]:
    """Each source's weight capped at `share` of the capped total (`prior` counted in the total).

    Args:
        weights: source -> summed vote weight.
        share: the most share one source may hold, in (0, 1]; 1 leaves the weights as they are.
        prior: pseudo-weight of an independent source in the total (the prior's `ec_prior_weight`).
        exempt: sources never capped (verified episodes); they still count in the total.

    Returns:
        source -> factor in (0, 1] to multiply that source's votes by.

    Example: one source of weight 9 and another of 1, share 0.5, no prior: the first is cut to
    1 (half of the capped total 2), factor 1/9.
    """
    if share >= 1.0 or not weights:
        return dict.fromkeys(weights, 1.0)
    capped = dict(weights)
    for _ in range(rounds):
        total = prior + sum(capped.values())
        limit = share * total
        over = {s: w for s, w in capped.items() if w > limit + 1e-12 and s not in exempt}
        if not over:
            break
        for s in over:
            capped[s] = limit
    return {s: (capped[s] / w if w > 0 else 1.0) for s, w in weights.items()}


@dataclass
class Vote:
    """One stored step's vote, after the defences: its weight and return, and why it changed."""

    step: StepRecord
    similarity: float
    weight: float
    ret: float
    source: str
    verified: bool
    outlier: bool = False


def flag_outliers(votes: Sequence[Vote], actions_of: dict[str, list[str]], similarity: float, tolerance: float):
    """Mark the unverified votes that disagree with verified experience (module docstring).

    Args:
        votes: the votes of one state's nearest steps.
        actions_of: step id -> the admissible actions its action votes for.
        similarity: states at least this similar to the query count as the same state.
        tolerance: the largest gap between a vote's return and its verified peers' mean.
    """
    near = [v for v in votes if v.verified and v.similarity >= similarity]
    verified_success = any(claims_success(v.step) for v in votes if v.verified)
    for v in votes:
        if v.verified:
            continue
        peers = [p.ret for p in near if set(actions_of.get(p.step.id, ())) & set(actions_of.get(v.step.id, ()))]
        if peers and abs(v.ret - sum(peers) / len(peers)) > tolerance:
            v.outlier = True
        elif claims_success(v.step) and not verified_success and near:
            v.outlier = True
