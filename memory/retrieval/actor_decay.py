"""Decaying credit learned under older actors, once per promotion.

Credit says how episodes went after they used a memory, and that depends on who played
them: a memory that helped the base model may do nothing for its fine-tuned successor, and
a successor's failures say little about what the base model needed. So when an actor is
promoted (an adapter, or a rollback to an earlier one or to the base model), credit learned
under older actors of the same base model is decayed toward the prior:

    uses  <- (1 - d) * uses          wins <- (1 - d) * wins
    utility = (wins + 1) / (uses + 2)                      (toward 0.5)
    value <- prior + (1 - d) * (value - prior)             (prior: the label before credit)

with d = `memory.actor_decay` (0.5 by default). The lifetime `use_count` and
`use_successes` are kept as history; the counts that still count, which `utility` is
computed from, are `credit_uses` and `credit_wins` (`effective_uses` and `effective_wins` on
a record: the lifetime counts until a first decay). Credit the new actor earns afterwards counts in full, so its own experience soon
outweighs what it inherited.

The decay is one `decay` journal entry per promotion (key `change`), listing every record it
touched: replaying the journal replays it, a second call for the same promotion does
nothing, and `crl memory history ID` shows it next to the credits.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DecayReport:
    """What `decay_older_actors` did.

    Attributes:
        change: the promotion (or other actor change) it was for.
        model_actor: the actor now playing.
        decay: the share of older credit forgotten.
        ids: the records decayed (empty when `already_applied`).
        already_applied: the decay for `change` was journalled before; nothing was done.
    """

    change: str
    model_actor: str
    decay: float
    ids: list[str]
    already_applied: bool


def decay_older_actors(
    bank, change: str, model_actor: str, decay: float | None = None, actor: str | None = None
) -> DecayReport:
    """Decay the credit older actors of `model_actor`'s base model left in the bank, once per `change`.

    Args:
        bank: the `ExperienceBank`.
        change: a key naming the actor change, e.g. `Promotion.key` from the adapter registry.
        model_actor: the actor promoted (`memory.actors.actor_key`).
        decay: the share forgotten (default: the bank's `memory.actor_decay`).
        actor: who the journal says decayed it (e.g. "promote:<adapter id>").

    Example:
        >>> decay_older_actors(bank, promotion.key, promotion.model_actor)  # doctest: +SKIP
    """
    share = bank.config.actor_decay if decay is None else float(decay)
    ids, already = bank.decay_credit(change, model_actor, share, actor=actor)
    return DecayReport(change, model_actor, share, ids, already)
