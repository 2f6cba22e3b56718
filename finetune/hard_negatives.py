"""Hard negatives for DPO: what failed episodes did that is known to be wrong, against what a
success did from the nearest state (level "hard_negative", `dpo_levels`).

Three kinds of rejected reply, read from failed episodes (`hard_negative_kinds`):

- inadmissible: the environment refused the action (`step.valid` False, from `info["invalid"]`),
  or the reply named no action at all (its text as written is rejected). Engine crashes
  (`info["error"]`) are not the model's doing and are skipped.
- looping: a reply the loop breaker replaced because it had been given in that same situation
  already (`step.extra.loop_break.replaced`), or an action taken again in the same situation
  (`step.extra.repeat`).
- known-losing: an action memory's own statistics value as losing there: in the same or
  near-identical states of the task it was taken only in failed episodes, by at least
  `hard_negative_min_losses` of them, and never in a successful one (the episodic-control
  estimate with nothing but losses behind it).

A step gives at most one negative of its own action (inadmissible before looping before
known-losing), plus the reply the loop breaker replaced, if any.

Each negative is paired with the action a successful episode of the same task took from the
nearest state: the same game state first, else the most similar state by embedding at or above
`dpo_state_similarity`, the same seed before others. Every task here is deterministic per seed,
so the same game state is recognised on the same seed by the same observation or, where the
task lists them, the same admissible actions: an observation also carries the feedback of the
action before it ("You look around."), which differs between two visits of one state, while
the admissible actions follow the room, the inventory and what is open. The chosen action must be admissible in
the rejected step's state, and no success near that state may have taken the rejected action.
The pair's prompt is the rejected step's own: the state where the mistake was made, as the
model saw it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from crl.finetune.sft_data import rejected_text, step_state_text
from crl.finetune.source import SourceEpisode
from crl.memory.trajectory import Step

Embed = Callable[[list[str]], np.ndarray]
KINDS = ("inadmissible", "looping", "known-losing")


@dataclass(frozen=True)
class HardNegative:
    """A reply of a failed episode that is known to be wrong in its state.

    Attributes:
        kind: "inadmissible", "looping" or "known-losing".
        episode: the failed episode.
        step: the step whose prompt the reply answered.
        reply: the rejected reply, as the pair's rejected side.
        action: the rejected action ("" when the reply named none).
    """

    kind: str
    episode: SourceEpisode
    step: Step
    reply: str
    action: str


@dataclass(frozen=True)
class HardNegativePair:
    """A hard negative and the successful step it is paired with."""

    negative: HardNegative
    episode: SourceEpisode
    step: Step


class StateNeighbours:
    """The steps of some episodes, and which of them are in the same or a near-identical state.

    Two steps share a state when they belong to the same task and are in the same game state
    (same seed, and the same observation or the same listed admissible actions), or their
    state texts (`step_state_text`) have a cosine similarity of at least `threshold`.
    """

    def __init__(self, episodes: Sequence[SourceEpisode], embed: Embed, threshold: float):
        self.entries = [(ep, s) for ep in episodes for s in ep.steps if s.index not in ep.quarantined_steps]
        self.position = {(ep.id, s.index): i for i, (ep, s) in enumerate(self.entries)}
        self.threshold = threshold
        texts = [step_state_text(ep.record.goal, ep.steps, s.index) for ep, s in self.entries]
        self.vectors = embed(texts) if texts else np.zeros((0, 1), dtype=np.float32)
        self.seeds = np.array([ep.record.seed for ep, _ in self.entries])
        self.observations = _ids([s.observation for _, s in self.entries])
        self.admissible = _ids([frozenset(s.admissible_actions or ()) for _, s in self.entries], unknown=frozenset())
        tasks = [ep.record.task for ep, _ in self.entries]
        self.by_task = {t: np.array([i for i, x in enumerate(tasks) if x == t]) for t in set(tasks)}

    def near(self, episode: SourceEpisode, step: Step) -> list[tuple[int, bool, float]]:
        """The entries in the same or a near-identical state as `step` (itself included), each as
        (index into `entries`, same game state, similarity), nearest first: the same game
        state, then the same seed, then by similarity."""
        i = self.position[(episode.id, step.index)]
        candidates = self.by_task[episode.record.task]
        sims = self.vectors[candidates] @ self.vectors[i]
        same_seed = self.seeds[candidates] == self.seeds[i]
        same_view = self.observations[candidates] == self.observations[i]
        same_actions = (self.admissible[candidates] == self.admissible[i]) & (self.admissible[i] >= 0)
        exact = same_seed & (same_view | same_actions)
        keep = np.flatnonzero(exact | (sims >= self.threshold))
        order = sorted(keep.tolist(), key=lambda k: (not exact[k], not same_seed[k], -sims[k], candidates[k]))
        return [(int(candidates[k]), bool(exact[k]), float(sims[k])) for k in order]


def _ids(values: Sequence[Hashable], unknown: Hashable | None = None) -> np.ndarray:
    """Each value as a small integer, equal values equal (`unknown` as -1, equal to nothing)."""
    index: dict[Hashable, int] = {}
    return np.array([-1 if v == unknown else index.setdefault(v, len(index)) for v in values], dtype=np.int64)


def _loop_broken_reply(step: Step, episode: SourceEpisode) -> tuple[str, str]:
    """The reply the loop breaker replaced, and its action ("" when it named none)."""
    replaced = step.extra.loop_break.replaced
    if replaced in (step.admissible_actions or []):
        shape = episode.shape
        if shape is not None and shape.react and step.thought:
            return f"Thought: {step.thought}\nAction: {replaced}", replaced
        return f"Action: {replaced}", replaced
    return step.raw_output.rstrip(), ""


def _known_losing(episode: SourceEpisode, step: Step, states: StateNeighbours, min_losses: int) -> bool:
    losses = set()
    for j, _, _ in states.near(episode, step):
        other_ep, other = states.entries[j]
        if other.action != step.action or not other.valid:
            continue
        if other_ep.record.success:
            return False
        losses.add(other_ep.id)
    return len(losses) >= min_losses


def find_negatives(
    failures: Sequence[SourceEpisode], kinds: Sequence[str], states: StateNeighbours, min_losses: int
) -> Iterator[HardNegative]:
    """The hard negatives of `failures`, of the given kinds (module docstring)."""
    for ep in failures:
        for step in ep.steps:
            if step.index in ep.quarantined_steps or "error" in step.info:
                continue
            if "looping" in kinds and step.extra.loop_break is not None:
                reply, action = _loop_broken_reply(step, ep)
                yield HardNegative("looping", ep, step, reply, action)
            if not step.valid:
                if "inadmissible" in kinds and (step.action or step.raw_output.strip()):
                    yield HardNegative("inadmissible", ep, step, rejected_text(step, ep), step.action)
            elif not step.action:
                continue
            elif "looping" in kinds and step.extra.repeat:
                yield HardNegative("looping", ep, step, rejected_text(step, ep), step.action)
            elif "known-losing" in kinds and _known_losing(ep, step, states, min_losses):
                yield HardNegative("known-losing", ep, step, rejected_text(step, ep), step.action)


def pair_negative(negative: HardNegative, states: StateNeighbours, dropped: Counter) -> HardNegativePair | None:
    """The successful step to prefer to `negative`: the nearest success's action that is
    admissible in the negative's state (None, counted in `dropped`, when there is none)."""
    near = []
    for j, _, _ in states.near(negative.episode, negative.step):
        ep, step = states.entries[j]
        if ep.record.success and step.valid and step.action and ep.shape is not None:
            near.append((ep, step))
    if not near:
        dropped["hard_negative:no-success-nearby"] += 1
        return None
    if negative.action and negative.action in {s.action for _, s in near}:
        dropped["hard_negative:rejected-also-succeeded"] += 1
        return None
    admissible = negative.step.admissible_actions
    for ep, step in near:
        if not admissible or step.action in admissible:
            return HardNegativePair(negative, ep, step)
    dropped["hard_negative:chosen-not-admissible"] += 1
    return None


def hard_negative_pairs(
    successes: Sequence[SourceEpisode],
    failures: Sequence[SourceEpisode],
    kinds: Sequence[str],
    state_similarity: float,
    min_losses: int,
    embed: Embed,
    dropped: Counter,
    found: Counter,
) -> list[HardNegativePair]:
    """Every hard negative of `failures` paired with a success's step; `found` counts the
    negatives found by kind, `dropped` those left unpaired by reason (and failed episodes whose
    prompts cannot be rebuilt, counted once each)."""
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown hard negative kinds {sorted(unknown)}; choose from {', '.join(KINDS)}")
    shapeless = [ep for ep in failures if ep.shape is None]
    if shapeless:
        dropped["hard_negative:unknown-prompt-shape"] += len(shapeless)
        failures = [ep for ep in failures if ep.shape is not None]
    if not successes or not failures:
        return []
    states = StateNeighbours([*successes, *failures], embed, state_similarity)
    pairs = []
    for negative in find_negatives(failures, kinds, states, min_losses):
        found[negative.kind] += 1
        pair = pair_negative(negative, states, dropped)
        if pair is not None:
            pairs.append(pair)
    return pairs
