"""Training targets from the posterior policy's logged decisions (`step.extra.policy.posterior`).

Under `--policy posterior` every scored step logs, per admissible action, the model's
probability, the posterior and memory's evidence (q, baseline, advantage, support). Two
kinds of training data are read off those logs:

- soft SFT targets: instead of the one action a successful episode took, the posterior's
  top actions in that state, each weighted by its share of the posterior mass;
- Q pairs for DPO: where memory confidently knows the model's argmax loses (advantage <=
  -threshold with support), the action memory rates best (positive advantage, with support)
  is preferred to it, on that step's prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from crl.memory.trajectory import Step


@dataclass(frozen=True)
class LoggedAction:
    """One candidate of a logged posterior decision.

    Attributes:
        action: the admissible action.
        model: pi_model(a | s).
        posterior: pi(a | s).
        q: memory's value of the action (None when memory had no evidence on it).
        advantage: q minus the state's baseline (None without evidence).
        support: the vote weight behind q (0 without evidence).
    """

    action: str
    model: float
    posterior: float
    q: float | None = None
    advantage: float | None = None
    support: float = 0.0


@dataclass(frozen=True)
class LoggedPosterior:
    """A posterior decision as the step log holds it (`agent.posterior.PosteriorDecision.to_dict`)."""

    chosen: str
    model_best: str
    avoided: tuple[str, ...]
    actions: tuple[LoggedAction, ...]

    @classmethod
    def of(cls, step: Step) -> LoggedPosterior | None:
        """The decision logged with `step`, or None when the posterior policy did not decide it."""
        policy = step.extra.policy
        logged = policy.posterior if policy is not None else None
        if not logged:
            return None
        return cls.from_dict(logged)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LoggedPosterior:
        """Read the logged form.

        Example:
            >>> d = LoggedPosterior.from_dict({"chosen": "look", "model_best": "look",
            ...     "actions": {"look": {"model": 0.9, "posterior": 0.9}}})
            >>> d.actions[0].posterior
            0.9
        """
        actions = []
        for name, entry in data.get("actions", {}).items():
            memory = entry.get("memory") or {}
            if memory.get("n", 1) == 0:
                memory = {}  # an untried action's optimistic prior (explore_untried) is no evidence
            actions.append(
                LoggedAction(
                    action=name,
                    model=float(entry.get("model", 0.0)),
                    posterior=float(entry.get("posterior", 0.0)),
                    q=memory.get("q"),
                    advantage=memory.get("advantage"),
                    support=float(memory.get("support", 0.0)),
                )
            )
        return cls(data["chosen"], data["model_best"], tuple(data.get("avoided", ())), tuple(actions))

    def get(self, action: str) -> LoggedAction | None:
        """The candidate named `action`, or None."""
        return next((a for a in self.actions if a.action == action), None)


@dataclass(frozen=True)
class SoftTarget:
    """One action a soft SFT target teaches in a state.

    Attributes:
        action: the action.
        mass: its share of the kept posterior mass (the kept targets of a state sum to 1).
        copies: how many identical rows carry it (out of the state's rows; `apportion`).
    """

    action: str
    mass: float
    copies: int


def soft_targets(decision: LoggedPosterior, top_k: int, min_mass: float, rows: int) -> list[SoftTarget]:
    """The posterior's top actions in a state, weighted by their renormalised mass.

    The actions the policy avoided (already tried in this same situation) are left out first,
    as `agent.posterior.decide` leaves them out, and the rest renormalised. Of those, the
    `top_k` most probable with at least `min_mass` of that mass are kept; the action taken is
    always kept (the successful episode took it). Their masses are renormalised to sum to 1
    and realised as `rows` identical-prompt rows by `apportion`.

    Example: posterior (look 0.5, take key 0.3, go west 0.15, wait 0.05), "look" avoided,
    "take key" chosen, top_k 2, min_mass 0.1: open masses 0.6, 0.3, 0.1; kept take key and
    go west, weights 2/3 and 1/3; with 4 rows, 3 copies and 1.
    """
    if top_k < 1 or rows < 1:
        raise ValueError("soft targets need top_k >= 1 and rows >= 1")
    avoided = set(decision.avoided)
    open_ = [a for a in decision.actions if a.action not in avoided] or list(decision.actions)
    total = sum(a.posterior for a in open_)
    if total <= 0:
        return [SoftTarget(decision.chosen, 1.0, rows)]
    ranked = sorted(open_, key=lambda a: -a.posterior)
    kept = [a for a in ranked[:top_k] if a.posterior / total >= min_mass]
    if decision.chosen not in {a.action for a in kept}:
        chosen = decision.get(decision.chosen)
        kept.append(chosen if chosen is not None else LoggedAction(decision.chosen, 0.0, 0.0))
    kept_total = sum(a.posterior for a in kept)
    masses = [a.posterior / kept_total if kept_total > 0 else float(a.action == decision.chosen) for a in kept]
    copies = apportion(masses, rows)
    return [SoftTarget(a.action, m, c) for a, m, c in zip(kept, masses, copies)]


def apportion(weights: Sequence[float], total: int) -> list[int]:
    """Whole numbers summing to `total`, proportional to `weights` (largest remainder).

    Example:
        >>> apportion([0.7, 0.2, 0.1], 4)
        [3, 1, 0]
    """
    norm = sum(weights)
    if norm <= 0:
        raise ValueError("apportion needs a positive total weight")
    exact = [w / norm * total for w in weights]
    out = [int(x) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: (-(exact[i] - out[i]), -weights[i], i))
    for i in by_remainder[: total - sum(out)]:
        out[i] += 1
    return out


@dataclass(frozen=True)
class QPair:
    """A DPO preference read off memory's values at one step.

    Attributes:
        chosen: the action memory rates best there (positive advantage, with support).
        rejected: the model's argmax, which memory confidently knows loses there.
    """

    chosen: LoggedAction
    rejected: LoggedAction


def confident_loser(decision: LoggedPosterior, threshold: float, min_support: float) -> LoggedAction | None:
    """The model's argmax when memory's advantage on it is <= -threshold with support >= min_support."""
    best = decision.get(decision.model_best)
    if best is None or best.advantage is None:
        return None
    return best if best.advantage <= -threshold and best.support >= min_support else None


def q_pair(decision: LoggedPosterior, threshold: float, min_support: float) -> QPair | str | None:
    """The Q pair of a logged decision: None when memory does not confidently know the model's
    argmax loses there, a reason string when it does but rates no other action confidently
    better, else the pair.

    Example:
        >>> d = LoggedPosterior.from_dict({"chosen": "go west", "model_best": "look", "actions": {
        ...     "look": {"model": 0.8, "posterior": 0.2, "memory": {"q": -0.9, "advantage": -0.9, "support": 2}},
        ...     "go west": {"model": 0.2, "posterior": 0.8, "memory": {"q": 0.9, "advantage": 0.9, "support": 2}}}})
        >>> q_pair(d, threshold=0.2, min_support=1.0).chosen.action
        'go west'
    """
    loser = confident_loser(decision, threshold, min_support)
    if loser is None:
        return None
    better = [
        a
        for a in decision.actions
        if a.action != loser.action and a.advantage is not None and a.advantage > 0 and a.support >= min_support
    ]
    if not better:
        return "no-confident-better-action"
    best = max(better, key=lambda a: (a.advantage, a.support, -decision.actions.index(a)))
    return QPair(best, loser)
