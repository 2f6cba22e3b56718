"""Utility credit: after an episode, every memory its prompts used learns how the episode went.

A memory's use count and wins go up (`utility = (wins + 1) / (uses + 2)`, kept by the bank),
and its value label takes one EMA step (`v <- v + alpha * (target - v)`, `memory.tags`)
toward a target relative to how the family usually does:

    target = (1 + success - p) / 2        success in {0, 1}, p = the family's success rate

A success where successes are rare (p = 0.2) pulls toward 0.9; a success where they are
the norm (p = 0.9) barely moves it (0.55); a failure where success is the norm pulls hard
toward 0.05. A memory that neither helps nor hurts drifts to 0.5, one that keeps preceding
failure sinks, one that keeps preceding success rises. The reranker reads the same counts
as an advantage over p (`memory.rerank.utility_advantage`).

The family's success rate is recomputed from the bank each time, not kept in a separate
file: (successful episodes + 1) / (finished-or-not stored episodes + 2), quarantined ones
left out. It is the rate over everything stored, so it persists across runs for free and
follows the bank through curation and rollback; a caller that wants a windowed rate passes
`baseline`. The target is journalled with the credit entry, so replay never recomputes it.

Credit carries the actor that played the episode (`model_actor`, see `memory.actors`): each
memory remembers the actor it was last credited under, so that after a promotion what older
actors taught can be decayed (`memory.retrieval.actor_decay`). Paired credit, for
experiments, moves a memory by whether it made a difference on a seed played with and
without memory (`memory.retrieval.paired_credit`).

    >>> credit_target(True, 0.2)
    0.9
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from crl.memory.records import parse_record_id
from crl.memory.storage.outage import ServerUnavailable


@dataclass
class CreditReport:
    """What `credit_episode` did."""

    ids: list[str]
    success: bool
    baseline: float
    target: float
    model_actor: str | None = None


def family_success_rate(bank, family: str) -> float:
    """Laplace-smoothed share of the family's stored (non-quarantined) episodes that succeeded.

    While the memory server is unreachable: the rate last counted in this process (1/2 when
    none was), so credit can still be journalled (the journal records the target it used).
    """
    rates = getattr(bank, "success_rates", None)
    try:
        wins = bank.view.count("episode", family, ("ok",))
        rest = bank.view.count("episode", family, ("fail",))
    except ServerUnavailable as e:
        bank.server_failed(e)
        return rates.get(family, 0.5) if rates is not None else 0.5
    rate = (wins + 1) / (wins + rest + 2)
    if rates is not None:
        rates[family] = rate
    return rate


def credit_target(success: bool, baseline: float) -> float:
    """The EMA target of a memory used by an episode: (1 + success - baseline) / 2."""
    return min(1.0, max(0.0, (1.0 + float(success) - baseline) / 2.0))


def credit_episode(
    bank,
    episode_success: bool,
    family: str,
    used_ids: Iterable[str],
    baseline: float | None = None,
    actor: str | None = None,
    model_actor: str | None = None,
) -> CreditReport:
    """Credit every memory an episode's prompts used, once each, relative to the family's rate.

    Args:
        bank: the `ExperienceBank`.
        episode_success: whether the episode that used them succeeded.
        family: the episode's task family (its rate is the baseline).
        used_ids: ids of the memories put into its prompts (`ContextPack.used_ids()` of every
            step); repeats count once, since credit is per episode.
        baseline: the success rate to compare with (default: `family_success_rate`).
        actor: who the journal says credited them (e.g. "run:<run id>").
        model_actor: the actor that played the episode, `memory.actors.actor_key(episode.model,
            episode.adapter)`; None when unknown (such credit counts as an older actor's).

    Returns:
        A report with the ids credited, the baseline and the target used.

    Raises:
        ValueError: an id is not a memory record id.
    """
    ids = list(dict.fromkeys(used_ids))
    for rid in ids:
        parse_record_id(rid)
    p = family_success_rate(bank, family) if baseline is None else float(baseline)
    target = credit_target(episode_success, p)
    if ids:
        bank.credit(ids, episode_success, target=target, actor=actor, model_actor=model_actor)
    return CreditReport(ids, bool(episode_success), p, target, model_actor)
