"""Tags computed when experience is collected, and the update rule of the value label.

Following the seed (sections 2.1 and 3.1), an experience is worth keeping and reusing when it
succeeded, when it reached a reward that is rare in its episode, and when it visited a state
the bank has not seen. With no critic to measure a TD error, the initial value label is a
weighted sum of exactly those three signals, each in [0, 1]:

    sparsity  s   = share of the episode's steps with zero reward (1.0 for no reward at all)
    novelty   n_t = 1 - max cosine similarity between state t and the stored states of the
                    same task family, computed against the bank *before* the episode is
                    inserted (and against the episode's own earlier states, so a loop is
                    not novel twice); clipped to [0, 1]
    rarity    r_t = s if step t has a non-zero reward, else 0 ("under sparse reward, any
                    non-zero reward deserves a high value label")

    step value    v_t = w_success * success + w_reward * r_t + w_novelty * n_t
    episode value v   = w_success * success + w_reward * s * [any non-zero reward]
                        + w_novelty * mean_t(n_t)

with weights from `MemoryConfig.value_weights` (0.5 / 0.25 / 0.25 by default, so v is in
[0, 1]). Section 4.1 smooths value labels with an exponential moving average,
`v <- beta * v + (1 - beta) * target` with beta = 0.99. We write it with the step size
alpha = 1 - beta:

    v <- v + alpha * (target - v)

and call it each time a memory is used, with target = 1 when the episode that used it
succeeded and 0 when it failed (or any target in [0, 1] a caller computes). The default
alpha is 0.1 rather than 0.01 because a memory is used far fewer times than a replay-buffer
transition is resampled: after n uses the initial label keeps a weight of (1 - alpha)^n.

    >>> round(ema_update(0.5, 1.0, 0.1), 3)
    0.55

What credit taught is tied to the actor whose episodes gave it. When a better actor is
promoted, credit learned under older ones is decayed (`memory.retrieval.actor_decay`): the
value label moves back toward its label before the first credit (`value_prior`; 0.5, the
value of a memory that neither helps nor hurts, for memories credited before that label
was kept), keeping a share `keep` of what it learned:

    v <- prior + keep * (v - prior)

    >>> decay_toward(0.9, 0.5, 0.5)
    0.7
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from crl.memory.config import ValueWeights
from crl.memory.trajectory import Episode, Step

NEUTRAL_VALUE = 0.5


def outcome_of(episode: Episode) -> str:
    """'success', 'failure' (finished without success) or 'unfinished' (no end logged)."""
    if episode.success:
        return "success"
    return "failure" if episode.finished else "unfinished"


def reward_sparsity(rewards: Sequence[float]) -> float:
    """Share of steps with zero reward; 1.0 for an episode with no steps."""
    if not rewards:
        return 1.0
    return sum(1 for r in rewards if r == 0) / len(rewards)


def novelties(embeddings: np.ndarray, bank_max_similarity: Sequence[float | None]) -> list[float]:
    """Novelty of each new state: 1 - max cosine similarity to the bank and to earlier new states.

    Args:
        embeddings: (n, d) unit vectors of the new states, in episode order.
        bank_max_similarity: for each state, the highest similarity to a stored state of the
            same family, or None when the family has none.

    Example:
        >>> e = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
        >>> novelties(e, [None, None, None])
        [1.0, 0.0, 1.0]
    """
    out: list[float] = []
    for i, bank_sim in enumerate(bank_max_similarity):
        best = -1.0 if bank_sim is None else float(bank_sim)
        if i:
            best = max(best, float(np.max(embeddings[:i] @ embeddings[i])))
        out.append(float(min(1.0, max(0.0, 1.0 - best))))
    return out


def step_skills(steps: Iterable[Step], given: Iterable[str] = ()) -> list[list[str]]:
    """For each step, the sub-goals (`info["subgoals"]`) it reached for the first time; those `given`
    at the start (`memory.purpose.given_subgoals`: the door task begins with the key) none reached."""
    reached: set[str] = set(given)
    out: list[list[str]] = []
    for step in steps:
        subgoals = step.info.get("subgoals") if isinstance(step.info, dict) else None
        now = {str(k) for k, v in subgoals.items() if v} if isinstance(subgoals, dict) else set()
        out.append(sorted(now - reached))
        reached |= now
    return out


def episode_skills(episode: Episode) -> list[str]:
    """Sub-goals the episode reached, from its steps' info and its logged outcome."""
    names = {name for skills in step_skills(episode.steps) for name in skills}
    names |= {str(k) for k, v in episode.subgoals.items() if v}
    return sorted(names)


def step_value(success: bool, reward: float, sparsity: float, novelty: float, w: ValueWeights) -> float:
    """Initial value label of a step (formula in the module docstring)."""
    rarity = sparsity if reward != 0 else 0.0
    return w.success * float(success) + w.reward * rarity + w.novelty * novelty


def episode_value(success: bool, rewarded: bool, sparsity: float, mean_novelty: float, w: ValueWeights) -> float:
    """Initial value label of an episode (formula in the module docstring)."""
    return w.success * float(success) + w.reward * sparsity * float(rewarded) + w.novelty * mean_novelty


def ema_update(value: float, target: float, alpha: float) -> float:
    """One EMA step of a value label toward `target`: `value + alpha * (target - value)`."""
    return value + alpha * (target - value)


def decay_toward(value: float, prior: float, keep: float) -> float:
    """`value` pulled back toward `prior`, keeping a share `keep` of the difference."""
    return prior + keep * (value - prior)
