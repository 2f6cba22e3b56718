"""Episodic control: action values from the nearest stored states, and the policies using them.

Adapted from Blundell et al. 2016, "Model-Free Episodic Control": instead of a learned
critic, the value of taking action a in the current state is read from the k stored steps
of the same task family whose states are nearest (k = `ec_neighbours`):

    Q(s, a) = sum_i w_i * m_i(a) * r_i / sum_i w_i * m_i(a)

    w_i     vote weight of stored step i: (sim_i - s0) / (1 - s0), 0 below s0 =
            `ec_min_similarity` (a state identical to the query votes with 1)
    m_i(a)  1 when step i's action is a (same text after `normalise_action`),
            `ec_partial_weight` when it only shares the verb and the last word
            ("take brass key" votes for "take iron key"), else 0; where the task declares
            action roles (`memory.retrieval.action_roles`), a stored action that had a role
            matches the admissible actions with the same role instead ("go east" through the
            open door there votes for "go north" through the open door here)
    r_i     what followed step i:
              invalid action                        -> -ec_invalid_penalty
              repeated in the same situation        -> -ec_loop_penalty
                (`crl.tasks.situations`: the same observation, less what the task says does
                not fix the state)
              a detour, with `ec_loop_erasure` (its episode later stood again in the situation
                it was taken in: loop erasure leaves it off the path; or, where
                `memory.minimal_credit` marked it, a step the won episode did not need)
                                                    -> 0 in a success, the failure's value otherwise
              otherwise the larger of
                the outcome: episode succeeded d steps later -> +gamma^d, failed -> -gamma^d
                a milestone: a sub-goal reached d' steps later -> ec_subgoal_value * gamma^d'
            (unfinished episodes do not vote: their outcome is unknown). The milestone term
            lets a long compound task learn its first steps from failed episodes that got
            part of the way, which a reward only at the end cannot teach.

Each vote is further scaled by where its step came from (`VoteWeights`): a synthetic step by the
drift monitor's weight (`memory.synthesis.drift.synthetic_weight`, 1 unless its family's synthetic
experience has drifted from the real one), a step another actor played by `other_actor_weight`, a
step of another world by `other_world_weight` (both 1 unless set).

Poisoning defences (`memory.retrieval.influence`, on unless `retrieval.defences = false`): a
step whose success the environment did not verify does not vote, an outlier's vote counts with
`outlier_weight`, and no unverified source (an import, a run) holds more than `max_source_share` of
the support behind an action, the prior's pseudo-support counted as one
more source (`defended_votes`, `influence.cap_shares`).

`ActionValue.support` is the denominator (how much similar experience stands behind the
value) and `hint` says it in words for the prompt: "take key -> success 4 of 5". Actions
are listed best first by the value shrunk toward 0 with `ec_prior_weight` pseudo-support,
(Q * support) / (support + c), so four successes in five outrank a single lucky vote.

Policies (`--policy`): `choose_mixed` keeps the model's action unless memory's best action
has support >= `mixed_min_support` and a value at least `mixed_threshold` above the model
action's (0 when memory knows nothing of it). When the model gives no usable action, repeats
one already tried in the same situation, or picks one memory confidently values at or below
`-mixed_threshold`, the memory policy decides instead (a small model's typical failures are
exactly these: loops and the same wrong move every episode). `choose_memory` takes the best value after
shrinking each toward an optimistic prior, (Q * support + c * optimism) / (support + c), so
actions never tried here look slightly good and get explored; ties go to a seeded RNG.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from crl.memory.actors import actor_key
from crl.memory.purpose import for_purpose
from crl.memory.records import StepRecord
from crl.memory.retrieval.action_roles import ActionRoles
from crl.memory.retrieval.analogy import PhraseSimilarity, action_frame
from crl.memory.retrieval.config import RetrievalConfig
from crl.memory.retrieval.influence import Vote, cap_shares, counts_as_success, flag_outliers, is_verified, source_of
from crl.tasks.actions import normalise_action


@dataclass
class ActionValue:
    """Memory's estimate for one admissible action.

    Attributes:
        action: the admissible action, as the task spells it.
        value: similarity-weighted discounted outcome in [-1, 1] (module docstring).
        support: the sum of vote weights behind `value`.
        n: stored steps that voted.
        successes / failures: how many of those episodes succeeded / failed.
        invalid / repeated: votes from invalid or looping stored actions.
        evidence: ids of the stored steps that voted.
        outliers: votes flagged as outliers and down-weighted (`memory.retrieval.influence`).
        capped: sources whose votes were scaled down to `max_source_share` of the support.
        unverified / unverified_successes: votes (and successes among them) whose outcome the
            environment did not verify; with `defended` (the defences were on) the hint leaves
            them out of its counts.
        role: the action's role here when the task declares roles and it has one (the stored
            steps behind the value matched it by role); the hint names it.
        similar: votes from stored steps whose action only shared the verb and last word
            (`ec_partial_weight`), not the action itself; the hint says so, so "success 0 of 10"
            is never read as ten tries of this very action (`similar_unverified` of them unverified).
    """

    action: str
    value: float
    support: float
    n: int
    successes: int
    failures: int
    invalid: int = 0
    repeated: int = 0
    evidence: list[str] = field(default_factory=list)
    outliers: int = 0
    capped: int = 0
    unverified: int = 0
    unverified_successes: int = 0
    defended: bool = False
    role: str | None = None
    similar: int = 0
    similar_unverified: int = 0
    weighted_return: float = field(default=0.0, repr=False)

    def add_vote(
        self,
        step: StepRecord,
        weight: float,
        ret: float,
        success: bool,
        similar: bool,
        verified: bool = True,
        outlier: bool = False,
    ) -> None:
        """Count one stored step's vote: `weight` into the support, `weight * ret` into the value
        (`value` = weighted mean once every vote is in), and the step into the tallies."""
        self.support += weight
        self.weighted_return += weight * ret
        self.value = self.weighted_return / self.support if self.support > 0 else 0.0
        self.n += 1
        self.successes += success
        self.failures += step.episode_outcome == "failure"
        self.invalid += not step.valid
        self.repeated += step.valid and step.repeated
        self.outliers += outlier
        self.unverified += not verified
        self.unverified_successes += not verified and step.episode_outcome == "success"
        self.similar += similar
        self.similar_unverified += similar and not verified
        self.evidence.append(step.id)

    def shrunk(self, prior: float, weight: float) -> float:
        """The value pulled toward `prior` as if `weight` more support voted for it."""
        return (self.value * self.support + weight * prior) / (self.support + weight)

    def to_dict(self) -> dict[str, Any]:
        """The numbers and the hint, JSON-ready (evidence ids left out: they can be many); the
        defences' counts only when they acted."""
        out = {
            "value": round(self.value, 4),
            "support": round(self.support, 4),
            "n": self.n,
            "successes": self.successes,
            "failures": self.failures,
            "invalid": self.invalid,
            "repeated": self.repeated,
            "hint": self.hint,
        }
        if self.similar:
            out["similar"] = self.similar
        if self.outliers:
            out["outliers"] = self.outliers
        if self.capped:
            out["capped_sources"] = self.capped
        return out

    @property
    def hint(self) -> str:
        """One line for the prompt, e.g. "take key → success 4 of 5". With the defences on, the counts
        are of environment-verified votes only and the others are added as "(+3 unverified)", so a
        crowd of forged claims never reads as strong evidence. Votes of similar actions only (verb and
        last word) are said to be: "put pen in end table → similar actions: success 0 of 2", or
        "(1 by similar action)" beside votes of the action itself."""
        from crl.prompts.memory_text import render_action_value

        action = f"{self.action} ({self.role})" if self.role else self.action
        if not (self.defended and self.unverified):
            return render_action_value(
                action, self.successes, self.n, self.invalid, self.repeated, similar=self.similar
            )
        return render_action_value(
            action,
            self.successes - self.unverified_successes,
            self.n - self.unverified,
            self.invalid,
            self.repeated,
            unverified=self.unverified,
            similar=self.similar - self.similar_unverified,
        )


def vote_weight(similarity: float, min_similarity: float) -> float:
    """(sim - s0) / (1 - s0), clipped to [0, 1]."""
    return min(1.0, max(0.0, (similarity - min_similarity) / (1.0 - min_similarity)))


@dataclass(frozen=True)
class VoteWeights:
    """How much a stored step's vote counts by where it came from (1 each by default).

    Attributes:
        synthetic: the factor on a synthetic step (the drift monitor's weight,
            `ContextPack.synthetic_weight`).
        actor, other_actor: the acting model (`memory.actors.actor_key`) and the factor on steps
            another actor played (or synthesis, which no actor played); `actor` None: every actor alike.
        world, other_world: the world being played, (task, seed), and the factor on steps stored
            in other worlds. Where other worlds hold the same state texts (twx rooms), their counts
            would otherwise outvote what this world's own earlier attempts showed. Below 1, a
            world's own steps also come first among equally similar neighbours in the
            `ec_neighbours` cut (otherwise the record id breaks the tie).
    """

    synthetic: float = 1.0
    actor: str | None = None
    other_actor: float = 1.0
    world: tuple[str, int] | None = None
    other_world: float = 1.0

    def of(self, step: StepRecord) -> float:
        """The factor `step`'s vote counts with."""
        factor = self.synthetic if step.source == "synthetic" else 1.0
        if self.actor is not None and self.other_actor != 1.0 and not played_by(step, self.actor):
            factor *= self.other_actor
        if self.prefers_own_world and not self.own_world(step):
            factor *= self.other_world
        return factor

    @property
    def prefers_own_world(self) -> bool:
        """Whether steps of other worlds count less than this world's own."""
        return self.world is not None and self.other_world != 1.0

    def own_world(self, step: StepRecord) -> bool:
        """Whether `step` was stored in the world being played."""
        return self.world is not None and (step.task, step.seed) == self.world

    def nearest(self, neighbours: Sequence[tuple[StepRecord, float]], k: int) -> list[tuple[StepRecord, float]]:
        """The `k` most similar neighbours; ties go to this world's own steps when other worlds
        count less, then to the lower record id."""
        prefer = self.prefers_own_world
        return sorted(neighbours, key=lambda n: (-n[1], prefer and not self.own_world(n[0]), n[0].id))[:k]


def played_by(step: StepRecord, actor: str) -> bool:
    """Whether `actor` (`memory.actors.actor_key`) played the stored step."""
    return step.source != "synthetic" and bool(step.model) and actor_key(step.model, step.adapter) == actor


def erased(step: StepRecord, config: RetrievalConfig) -> bool:
    """Whether loop-erased credit (`config.ec_loop_erasure`) takes the win after `step` away: a detour,
    or a step its won episode did not need (marked with `memory.minimal_credit`)."""
    return config.ec_loop_erasure and (step.detour or step.unneeded)


def step_return(step: StepRecord, config: RetrievalConfig) -> float | None:
    """What followed a stored step (module docstring); None when its episode never ended."""
    if step.episode_outcome == "unfinished":
        return None
    if not step.valid:
        return -config.ec_invalid_penalty
    if step.repeated:
        return -config.ec_loop_penalty
    discounted = config.ec_gamma ** (step.steps_to_end or 0)
    outcome = discounted if step.episode_outcome == "success" else -discounted
    if erased(step, config):
        return min(outcome, 0.0)
    if step.subgoal_in is None or config.ec_subgoal_value <= 0:
        return outcome
    return max(outcome, config.ec_subgoal_value * config.ec_gamma**step.subgoal_in)


class ActionIndex:
    """The admissible actions, indexed for matching stored actions to them (`m_i(a)` above).

    With `roles` (`memory.retrieval.action_roles`), a stored step whose action had a role votes for
    the admissible actions with that role, with weight 1; otherwise it votes by text for those
    without one: exact text after `normalise_action` with weight 1, else verb and last word with
    weight `partial`. With `analogy` (`memory.retrieval.analogy`), a stored action with an object and
    a target votes instead for the admissible ones with the same verb, preposition and target, with
    the similarity weight of the two objects.
    """

    def __init__(
        self,
        admissible: Sequence[str],
        partial: float,
        roles: ActionRoles | None = None,
        analogy: PhraseSimilarity | None = None,
    ):
        self.partial = partial
        self.roles = roles
        self.analogy = analogy
        self.by_frame: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
        self.by_norm: dict[str, list[str]] = {}
        self.by_shape: dict[tuple[str, str], list[str]] = {}
        self.by_role: dict[str, list[str]] = {}
        self.role_of: dict[str, str] = {}
        for a in dict.fromkeys(admissible):
            role = roles.current(a) if roles is not None else None
            if role:
                self.by_role.setdefault(role, []).append(a)
                self.role_of[a] = role
                continue
            norm = normalise_action(a)
            self.by_norm.setdefault(norm, []).append(a)
            frame = action_frame(norm) if analogy is not None else None
            if frame:
                self.by_frame.setdefault(frame.key, []).append((a, frame.object))
            words = norm.split()
            if len(words) >= 2:
                self.by_shape.setdefault((words[0], words[-1]), []).append(a)

    def matches(self, step: StepRecord) -> list[tuple[str, float]]:
        """(admissible action, match weight) for each action the stored step votes for."""
        if self.roles is not None:
            role = self.roles.stored(step.observation, step.action)
            if role:
                return [(a, 1.0) for a in self.by_role.get(role, [])]
        stored = normalise_action(step.action)
        exact = self.by_norm.get(stored)
        if exact:
            return [(a, 1.0) for a in exact]
        frame = action_frame(stored) if self.analogy is not None else None
        if frame:
            alike = self.by_frame.get(frame.key, [])
            weighted = [(a, self.analogy.weight(obj, frame.object)) for a, obj in alike]
            return [(a, w) for a, w in weighted if w > 0]
        words = stored.split()
        if self.partial <= 0 or len(words) < 2:
            return []
        return [(a, self.partial) for a in self.by_shape.get((words[0], words[-1]), [])]

    def prepare(self, steps: Iterable[StepRecord]) -> None:
        """Embed, in one batch, the objects analogy will compare for these stored steps."""
        if self.analogy is None:
            return
        objects = [obj for pairs in self.by_frame.values() for _, obj in pairs]
        for step in steps:
            frame = action_frame(step.action)
            if frame and frame.key in self.by_frame:
                objects.append(frame.object)
        self.analogy.prepare(objects)


def defended_votes(
    neighbours: Sequence[tuple[StepRecord, float]],
    config: RetrievalConfig,
    weights: VoteWeights = VoteWeights(),
    actions_of: dict[str, list[str]] | None = None,
) -> list[Vote]:
    """The votes of the `config.ec_neighbours` nearest stored steps, with the poisoning defences of
    `memory.retrieval.influence` applied (those switched on): unverified successes dropped before
    the nearest are taken (so a crowd of them cannot push out the votes that count), outliers
    down-weighted. The per-source cap is per action, in `action_values`.

    Args:
        weights: the factors on votes by their source, actor and world (`VoteWeights`).
        actions_of: step id -> the admissible actions it votes for (the outlier check compares
            votes for the same action; without it, for the same normalised stored action).
    """
    verified_only = config.defence("verified_only")
    if verified_only:
        neighbours = [(s, sim) for s, sim in neighbours if s.episode_outcome != "success" or counts_as_success(s)]
    votes: list[Vote] = []
    for step, sim in weights.nearest(neighbours, config.ec_neighbours):
        w = vote_weight(sim, config.ec_min_similarity) * weights.of(step)
        r = step_return(step, config)
        if w <= 0 or r is None:
            continue
        votes.append(Vote(step, sim, w, r, source_of(step), is_verified(step)))
    if config.defences and config.outlier_weight < 1.0 and votes:
        mapping = actions_of or {v.step.id: [normalise_action(v.step.action)] for v in votes}
        flag_outliers(votes, mapping, config.outlier_similarity, config.outlier_tolerance)
        for v in votes:
            if v.outlier:
                v.weight *= config.outlier_factor
    return votes


def action_values(
    neighbours: Sequence[tuple[StepRecord, float]],
    admissible: Sequence[str],
    config: RetrievalConfig,
    weights: VoteWeights = VoteWeights(),
    roles: ActionRoles | None = None,
    analogy: PhraseSimilarity | None = None,
) -> dict[str, ActionValue]:
    """Values of the admissible actions from stored steps near the current state.

    Args:
        neighbours: (stored step, cosine similarity to the current state), any order; only
            the `config.ec_neighbours` most similar vote.
        admissible: the actions the task accepts now.
        weights: the factors on votes by their source, actor and world (`VoteWeights`).
        roles: the task's action roles in the current state (`ActionIndex`); ignored when
            `config.ec_action_roles` is off.
        analogy: object similarity for analogical matching (`memory.retrieval.analogy`); used when
            `config.ec_analogy` is on.

    Returns:
        The admissible actions that got at least one vote, best first by value shrunk toward
        0 by `ec_prior_weight` (so one lucky vote does not outrank four out of five). With the
        defences on (`memory.retrieval.influence`), unverified successes do not vote, outliers
        count with `outlier_weight`, and no source holds more than `max_source_share` of an
        action's support.
    """
    index = ActionIndex(
        admissible,
        config.ec_partial_weight,
        roles if config.ec_action_roles else None,
        analogy if config.ec_analogy else None,
    )
    index.prepare(step for step, _ in neighbours)
    matched = {id(step): index.matches(step) for step, _ in neighbours}
    actions_of = {step.id: [a for a, _ in matched[id(step)]] for step, _ in neighbours}
    votes = defended_votes(neighbours, config, weights, actions_of)
    per_action: dict[str, list[tuple[Vote, float]]] = {}
    for vote in votes:
        for action, m in matched[id(vote.step)]:
            per_action.setdefault(action, []).append((vote, m))
    acc: dict[str, ActionValue] = {}
    share = config.source_share
    for action, cast in per_action.items():
        by_source: dict[str, float] = {}
        for vote, m in cast:
            by_source[vote.source] = by_source.get(vote.source, 0.0) + vote.weight * m
        factor = cap_shares(by_source, share, config.ec_prior_weight, {v.source for v, _ in cast if v.verified})
        av = ActionValue(action, 0.0, 0.0, 0, 0, 0, defended=config.defences, role=index.role_of.get(action))
        for vote, m in cast:
            step = vote.step
            success = step.episode_outcome == "success" and not erased(step, config)
            av.add_vote(
                step, vote.weight * m * factor[vote.source], vote.ret, success, m < 1.0, vote.verified, vote.outlier
            )
        av.capped = sum(1 for f in factor.values() if f < 1.0)
        if av.support > 0:
            acc[action] = av
    return best_first(acc, config)


def best_first(values: dict[str, ActionValue], config: RetrievalConfig) -> dict[str, ActionValue]:
    """The values ordered best first by value shrunk toward 0 with `ec_prior_weight` pseudo-support
    (ties by action text)."""
    c = config.ec_prior_weight
    return dict(sorted(values.items(), key=lambda kv: (-kv[1].shrunk(0.0, c), kv[0])))


def merge_analogous(
    local: dict[str, ActionValue], analogous: dict[str, ActionValue], config: RetrievalConfig
) -> dict[str, ActionValue]:
    """`local` values where the nearest states voted for the action itself (a vote that was not
    by a similar action), the analogous value otherwise; best first as in `action_values`."""
    merged = dict(analogous)
    for action, value in local.items():
        if value.n > value.similar or action not in analogous:
            merged[action] = value
    return best_first(merged, config)


def _lookup(values: dict[str, ActionValue], action: str) -> ActionValue | None:
    if action in values:
        return values[action]
    norm = normalise_action(action)
    return next((v for k, v in values.items() if normalise_action(k) == norm), None)


def choose_mixed(
    model_action: str | None,
    values: dict[str, ActionValue],
    config: RetrievalConfig,
    explore: Callable[[], tuple[str, str]] | None = None,
    tried: Collection[str] = (),
) -> tuple[str | None, str, str]:
    """The model's action, unless memory holds a confident, clearly better one, or knows the
    model's action to be a mistake here.

    Args:
        model_action: what the model chose (None when its reply could not be parsed).
        values: `action_values` for the current state.
        explore: the memory policy's choice (`choose_memory`), used when the model gives no
            usable action, repeats an action already tried in this situation, or picks one
            that memory confidently values at or below `-mixed_threshold`. Without it those
            cases fall back to memory's confident best, if any.
        tried: actions this episode already took after this same observation.

    Returns:
        (action, decided_by, reason), decided_by "llm" or "memory". With no model action
        and nothing from memory, the action is None (the caller handles the bad reply).
    """
    confident = [v for v in values.values() if v.support >= config.mixed_min_support]
    best = max(confident, key=lambda v: (v.value, v.support), default=None)
    mine = _lookup(values, model_action) if model_action is not None else None
    mistake = None
    if model_action is None:
        mistake = "model gave no usable action"
    elif normalise_action(model_action) in {normalise_action(a) for a in tried}:
        mistake = f"the model repeats {model_action!r} in this same situation"
    elif mine is not None and mine.support >= config.mixed_min_support and mine.value <= -config.mixed_threshold:
        mistake = f"memory knows the model's {model_action!r}: {mine.hint} (value {mine.value:+.2f})"
    if mistake and explore is not None:
        action, reason = explore()
        return action, "memory", f"{mistake}; {reason}"
    if best is None:
        return model_action, "llm", "memory has no confident value here"
    if model_action is None:
        return best.action, "memory", f"model gave no action; memory: {best.hint} (value {best.value:+.2f})"
    if mine is best:
        return model_action, "llm", f"memory agrees: {best.hint}"
    model_value = mine.value if mine is not None else 0.0
    margin = best.value - model_value
    if margin >= config.mixed_threshold:
        return (
            best.action,
            "memory",
            f"memory: {best.hint} (value {best.value:+.2f}) over the model's {model_action!r} ({model_value:+.2f})",
        )
    return (
        model_action,
        "llm",
        f"memory's best {best.action!r} is only {margin:+.2f} better (needs {config.mixed_threshold:.2f})",
    )


def choose_memory(
    values: dict[str, ActionValue],
    admissible: Sequence[str],
    rng: random.Random,
    config: RetrievalConfig | None = None,
    tried: Collection[str] = (),
) -> tuple[str, str]:
    """The action memory values most, exploring what it has not tried (`--policy memory`).

    Args:
        values: `action_values` for the current state.
        admissible: the actions the task accepts now.
        rng: breaks ties (seed it for reproducible runs).
        tried: actions this episode already took after this same observation; each loses
            `ec_loop_penalty`, so the policy does not walk in circles.

    Returns:
        (action, reason).

    Raises:
        ValueError: no admissible actions.
    """
    if not admissible:
        raise ValueError("choose_memory needs the admissible actions; use --policy llm for tasks without them")
    cfg = config or RetrievalConfig()
    c, prior = cfg.ec_prior_weight, cfg.ec_optimism
    done = {normalise_action(a) for a in tried}
    estimates: list[tuple[float, str, str]] = []
    for a in dict.fromkeys(admissible):
        v = _lookup(values, a)
        est = prior if v is None else v.shrunk(prior, c)
        why = f"no experience of {a!r} here (prior {prior:+.2f})" if v is None else f"{v.hint} (value {v.value:+.2f})"
        if normalise_action(a) in done:
            est -= cfg.ec_loop_penalty
            why += ", already tried here"
        estimates.append((est, a, why))
    top = max(e for e, _, _ in estimates)
    ties = [(a, why) for e, a, why in estimates if e >= top - 1e-9]
    action, why = ties[rng.randrange(len(ties))] if len(ties) > 1 else ties[0]
    return action, f"memory: {why}"


# ---- advantages: what the posterior policy reads (agent/posterior.py) ----


@dataclass(frozen=True)
class MemoryAdvantage:
    """Memory's evidence on one action in the current state.

    Attributes:
        action: the admissible action.
        q: what followed this action in the nearest stored states (`ActionValue.value`).
        baseline: what followed any action from those states (their support-weighted mean return).
        support: the vote weight behind `q` (`ActionValue.support`).
        n: stored steps that voted for the action.
        hint: the evidence in words, e.g. "take key → success 4 of 5".
        similar: of the n, votes of similar actions only (`ActionValue.similar`).
        successes: of the n, votes that succeeded (`ActionValue.successes`).
    """

    action: str
    q: float
    baseline: float
    support: float
    n: int = 0
    hint: str = ""
    similar: int = 0
    successes: int = 0

    @property
    def advantage(self) -> float:
        """q - baseline."""
        return self.q - self.baseline

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready numbers and hint (`similar` only when some votes were of similar actions)."""
        out = {
            "q": round(self.q, 4),
            "baseline": round(self.baseline, 4),
            "advantage": round(self.advantage, 4),
            "support": round(self.support, 4),
            "n": self.n,
            "hint": self.hint,
        }
        if self.successes:
            out["successes"] = self.successes
        if self.similar:
            out["similar"] = self.similar
        return out


@dataclass(frozen=True)
class UntriedPrior:
    """How memory values an admissible action that none of a known state's stored steps took.

    Attributes:
        q: the optimistic prior q of such an action, against the state's baseline: where
            everything tried here failed, what was never tried is worth more than what lost;
            where stored episodes succeeded, it is worth less than what won.
        support: the most support that guess carries (None: the state's whole support). The
            state's support says how sure the baseline is, not how sure the guess about an action
            nobody took is; capped, an untried action no longer outweighs one with a few real votes.
        floor: the guess is never below the state's baseline, so "never tried here" is no evidence
            against an action: where stored episodes mostly won, untried actions keep advantage 0
            (the model decides between them and what memory saw lose); where they mostly lost,
            the optimism stands.
        cap: which guesses `support` caps: "both", or "optimism" (only those above the baseline,
            where stored episodes mostly lost; below it, where they mostly won and none took this
            action, the guess carries the state's whole support, so what the winners did here
            outweighs the model's untried favourite).
    """

    q: float = 0.1
    support: float | None = None
    floor: bool = False
    cap: str = "both"

    def __post_init__(self) -> None:
        if not -1 <= self.q <= 1:
            raise ValueError(f"untried q (optimism) must be in [-1, 1], got {self.q}")
        if self.cap not in ("both", "optimism"):
            raise ValueError(f"untried_cap must be 'both' or 'optimism', got {self.cap!r}")
        if self.support is not None and self.support <= 0:
            raise ValueError(f"untried_support must be > 0 or None, got {self.support}")

    def advantage(self, action: str, baseline: float, state_support: float) -> MemoryAdvantage:
        """Memory's guess about `action`, untried in a state of this baseline and support."""
        q = max(self.q, baseline) if self.floor else self.q
        capped = self.support is not None and (self.cap == "both" or q > baseline)
        support = min(state_support, self.support) if capped else state_support
        return MemoryAdvantage(action, q, baseline, support, 0, f"{action} → never tried here")


def same_task_steps(neighbours: Sequence[tuple[StepRecord, float]], task: str) -> list[tuple[StepRecord, float]]:
    """The neighbours stored while playing `task` (e.g. "keyroom/chest"), so experience of one
    sub-task never votes on another whose states look alike."""
    return [(step, sim) for step, sim in neighbours if step.task == task]


def state_baseline(
    neighbours: Sequence[tuple[StepRecord, float]],
    config: RetrievalConfig,
    weights: VoteWeights = VoteWeights(),
) -> tuple[float, float]:
    """What followed any action from the nearest stored states: (support-weighted mean return, support).

    The same `config.ec_neighbours` nearest steps that vote in `action_values`, each weighted
    by `vote_weight` times `weights.of(step)`, whatever its action, under the same
    defences (`defended_votes`, and the source cap over the whole state); (0, 0) when none votes.
    """
    votes = defended_votes(neighbours, config, weights)
    by_source: dict[str, float] = {}
    for v in votes:
        by_source[v.source] = by_source.get(v.source, 0.0) + v.weight
    factor = cap_shares(by_source, config.source_share, config.ec_prior_weight, {v.source for v in votes if v.verified})
    total = weight = 0.0
    for v in votes:
        w = v.weight * factor[v.source]
        total += w * v.ret
        weight += w
    return (total / weight if weight else 0.0), weight


def memory_advantages(
    neighbours: Sequence[tuple[StepRecord, float]],
    admissible: Sequence[str],
    config: RetrievalConfig,
    task: str | None = None,
    untried: UntriedPrior | None = None,
    weights: VoteWeights = VoteWeights(),
    purpose: str | None = None,
    roles: ActionRoles | None = None,
    analogy: PhraseSimilarity | None = None,
    analogous: dict[str, ActionValue] | None = None,
) -> dict[str, MemoryAdvantage]:
    """Memory's advantage of each admissible action it has evidence on.

    Args:
        neighbours: (stored step, cosine similarity to the current state), as the retriever
            gives them to `action_values`.
        admissible: the actions the task accepts now.
        task: when given, only steps stored while playing this task vote (`same_task_steps`).
        untried: when given and memory holds close states, each admissible action no stored
            step took here gets the prior's guess (`UntriedPrior.advantage`) against the same
            baseline.
        weights: the factors on votes by their source, actor and world (`VoteWeights`), in the
            values, the baseline and the support behind both. Steps another actor played say how
            *that* actor went on from here (off-policy evidence for this one); steps of another
            world, how that world went on from a state that may only look the same.
        purpose: when given (instead of `task`), only steps that worked toward this sub-goal vote,
            from any task of the family, each valued by whether it reached it (`memory.purpose`).
        roles: the task's action roles in the current state, as in `action_values`.
        analogy: object similarity for analogical matching, as in `action_values`.
        analogous: the family-wide analogical values (`memory.retrieval.analogous_values`,
            `ContextPack.analogous`); they stand in for actions the neighbours did not vote for
            themselves (`merge_analogous`).

    Returns:
        Action -> `MemoryAdvantage`, for the actions with at least one vote (and, with
        `untried`, the others, n = 0).

    Example: four neighbours, all from episodes that succeeded two steps later, two of which
    took "examine door": its q equals the baseline, so its advantage is 0.
    """
    if purpose is not None:
        neighbours = for_purpose(neighbours, purpose)
    elif task is not None:
        neighbours = same_task_steps(neighbours, task)
    baseline, state_support = state_baseline(neighbours, config, weights)
    values = action_values(neighbours, admissible, config, weights, roles, analogy)
    if analogous:
        values = merge_analogous(values, analogous, config)
    found = {
        action: MemoryAdvantage(action, v.value, baseline, v.support, v.n, v.hint, v.similar, v.successes)
        for action, v in values.items()
    }
    if untried is None or state_support <= 0:
        return found
    unknown = {a: untried.advantage(a, baseline, state_support) for a in admissible if a not in found}
    return found | unknown
