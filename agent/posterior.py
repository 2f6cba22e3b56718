"""One posterior over admissible actions: the model's prior times memory's advantage.

    pi(a | s)  proportional to  pi_model(a | s)^beta * exp(lambda(a) * A_mem(s, a) / alpha)

    pi_model   the model's probability of a (`crl.agent.llm.scoring`: softmax of the
               token-normalised log-likelihoods)
    A_mem      memory's advantage of a here: what followed a in the nearest stored states minus
               what followed any action there (`memory_advantages`), so an action that merely
               co-occurs with success (every stored episode from here succeeded whatever it did)
               earns nothing
    lambda(a)  support / (support + kappa), kappa = `PosteriorConfig.support_scale`: the weight
               of memory's evidence, 0 with no or only far neighbours (their vote weights are 0)
               and -> 1 as near-identical stored states pile up
    beta       how much the model's prior counts (0: not at all; 1: as scored)
    alpha      memory's temperature: an advantage of alpha multiplies the odds by e

With no support anywhere and beta = 1 the posterior is pi_model itself. An action no close
stored step took keeps advantage 0 (memory only moves mass between actions it has evidence on)
unless `explore_untried` is on: then, where memory holds close states, it is valued at the
optimistic prior `optimism` against the state's baseline (`PosteriorConfig.untried`, an
`UntriedPrior`).
This is the LLM-prior x exp(Q) posterior of Memory-Driven Self-Improvement (arXiv 2509.26340),
with Q replaced by a support-weighted advantage.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from crl.memory.retrieval.episodic_control import (
    MemoryAdvantage,
    UntriedPrior,
    VoteWeights,
    memory_advantages,
    same_task_steps,
    state_baseline,
)

__all__ = [
    "MemoryAdvantage",
    "PosteriorConfig",
    "PosteriorDecision",
    "UntriedPrior",
    "VoteWeights",
    "decide",
    "memory_advantages",
    "memory_weight",
    "posterior_probs",
    "same_task_steps",
    "state_baseline",
]

Mode = Literal["greedy", "sample"]
Condition = Literal["purpose", "task"]


@dataclass(frozen=True)
class PosteriorConfig:
    """How the model's prior and memory's values combine (module docstring).

    Defaults are provisional until the dev-seed sweep of issue #14 sets them.
    """

    beta: float = field(default=1.0, metadata={"help": "Exponent of the model's prior; 0 ignores the model."})
    alpha: float = field(
        default=0.25, metadata={"help": "Memory's temperature: an advantage of alpha multiplies the odds by e."}
    )
    support_scale: float = field(
        default=1.0, metadata={"help": "Support at which memory's evidence counts half (lambda = s / (s + this))."}
    )
    mode: Mode = field(default="greedy", metadata={"help": "'greedy' takes the posterior's argmax; 'sample' draws."})
    same_task: bool = field(
        default=True,
        metadata={
            "help": "Only experience stored while playing the same task (family/variant) gives advantages, "
            "so one sub-task's moves never outvote the model on another."
        },
    )

    explore_untried: bool = field(
        default=True,
        metadata={
            "help": "Where memory holds close states, value the actions no stored step took there at "
            "`optimism` (against the same baseline), so demoting a known loser hands the step to an "
            "untried action rather than to the model's next favourite that memory also saw lose."
        },
    )
    optimism: float = field(default=0.1, metadata={"help": "q of an untried action when `explore_untried` is on."})
    condition: Condition = field(
        default="purpose",
        metadata={
            "help": "With `same_task`, what experience must share to vote: 'purpose' (the sub-goal it worked toward, "
            "`memory.purpose`: door-task steps vote in a compound game's door phase; tasks with no declared "
            "sub-goals fall back to the task) or 'task' (only steps of the same task)."
        },
    )
    other_actor_weight: float = field(
        default=1.0,
        metadata={
            "help": "The factor on the votes of stored steps another actor played (another adapter, the base "
            "model, synthesis): their returns say how that actor went on, off-policy for this one. 1 counts "
            "every actor alike; 0 lets only the acting model's own steps among the `ec_neighbours` nearest vote."
        },
    )
    other_world_weight: float = field(
        default=1.0,
        metadata={
            "help": "The factor on the votes of stored steps of other worlds (another task or seed) than the one "
            "being played. 1 counts every world alike; below 1 a world's own earlier steps (an evaluation's "
            "retries) outweigh other worlds' counts on the same state text, and come first among equally "
            "similar neighbours; 0 lets only this world's own steps vote."
        },
    )
    untried_support: float | None = field(
        default=None,
        metadata={
            "help": "The most support an untried action's optimistic q carries (None: the state's whole support)."
        },
    )
    untried_floor: bool = field(
        default=False,
        metadata={
            "help": "An untried action's q is never below the state's baseline: where stored episodes mostly "
            "won, 'never tried here' is no evidence against an action (`memory_advantages`)."
        },
    )
    untried_cap: str = field(
        default="both",
        metadata={
            "help": "Which untried guesses `untried_support` caps: 'both', or 'optimism' (only those above the "
            "state's baseline; in a state whose stored episodes mostly won, an action none of them took carries "
            "the state's whole support against it)."
        },
    )

    explore_enabling: bool = field(
        default=True,
        metadata={
            "help": "Where memory saw listed uses of a held object fail and none succeed (a use this episode "
            "lost points on counts as failed), first use a place exploration opened, else open a closed one "
            "(`agent.directed_exploration`)."
        },
    )

    draw: int = field(
        default=0,
        metadata={
            "help": "Which draw of the sampled posterior: runs with the same draw sample the same actions per "
            "seed and step (reproducible); an evaluation's retries take a new draw per attempt."
        },
    )

    def __post_init__(self) -> None:
        if self.condition not in ("purpose", "task"):
            raise ValueError(f"posterior condition must be 'purpose' or 'task', got {self.condition!r}")
        if self.beta < 0:
            raise ValueError(f"posterior beta must be >= 0, got {self.beta}")
        if not 0 <= self.other_actor_weight <= 1:
            raise ValueError(f"posterior other_actor_weight must be in [0, 1], got {self.other_actor_weight}")
        if not 0 <= self.other_world_weight <= 1:
            raise ValueError(f"posterior other_world_weight must be in [0, 1], got {self.other_world_weight}")
        if self.alpha <= 0:
            raise ValueError(f"posterior alpha must be > 0 (math.inf ignores memory), got {self.alpha}")
        if self.support_scale <= 0:
            raise ValueError(f"posterior support_scale must be > 0, got {self.support_scale}")
        if self.draw < 0:
            raise ValueError(f"posterior draw must be >= 0, got {self.draw}")
        if self.mode not in ("greedy", "sample"):
            raise ValueError(f"posterior mode must be 'greedy' or 'sample', got {self.mode!r}")
        try:
            self.untried_prior()
        except ValueError as e:
            raise ValueError(f"posterior {e}") from None

    def vote_weights(
        self, actor: str | None = None, world: tuple[str, int] | None = None, synthetic: float = 1.0
    ) -> VoteWeights:
        """The factors on memory's votes for `actor` playing `world` (task, seed) under these settings."""
        return VoteWeights(synthetic, actor, self.other_actor_weight, world, self.other_world_weight)

    def rng(self, *key: object) -> random.Random:
        """The random source of one decision under these settings (`decision_rng` with this draw)."""
        return decision_rng(*key, draw=self.draw)

    def untried_prior(self) -> UntriedPrior:
        """How memory values actions no close stored step took (used only with `explore_untried`)."""
        return UntriedPrior(self.optimism, self.untried_support, self.untried_floor, self.untried_cap)

    @cached_property
    def untried(self) -> UntriedPrior | None:
        """The `untried` argument of `memory_advantages`: the prior, or None with `explore_untried` off."""
        return self.untried_prior() if self.explore_untried else None


def decision_rng(*key: object, draw: int = 0) -> random.Random:
    """The random source of one decision, keyed by what identifies it (task, seed, step, ...) and
    the draw: the same key and draw always give the same choices."""
    return random.Random(":".join(map(str, key)) + (f":draw{draw}" if draw else ""))


def memory_weight(support: float, support_scale: float) -> float:
    """lambda = support / (support + support_scale): 0 with no support, 1/2 at `support_scale`."""
    return support / (support + support_scale) if support > 0 else 0.0


@dataclass
class PosteriorDecision:
    """One decision of the posterior policy, for the step record and `crl explain`.

    Attributes:
        actions: the candidates, in the order scored.
        model_probs: pi_model per action.
        memory: memory's evidence per action (only those it has evidence on).
        weights: lambda per action (0 where memory has nothing).
        posterior: pi per action.
        chosen: the action taken.
        model_best: the model's argmax.
        posterior_best: the posterior's argmax (the model's on ties).
        mode: "greedy" or "sample".
        config: the beta, alpha and support scale used.
    """

    actions: list[str]
    model_probs: list[float]
    memory: dict[str, MemoryAdvantage]
    weights: list[float]
    posterior: list[float]
    chosen: str
    model_best: str
    posterior_best: str
    mode: Mode
    config: PosteriorConfig
    avoided: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    explored: list[str] = field(default_factory=list)
    revisits: list[str] = field(default_factory=list)
    ways_out: list[str] = field(default_factory=list)
    undoes: list[str] = field(default_factory=list)
    ahead: list[str] = field(default_factory=list)
    followed: bool = False
    punished: list[str] = field(default_factory=list)

    @property
    def memory_changed_argmax(self) -> bool:
        """Memory moved the argmax away from the model's choice."""
        return self.posterior_best != self.model_best

    @property
    def decided_by(self) -> str:
        """Who chose: "llm" when the model's argmax was taken, "memory" when memory's change of argmax
        was, "exploration" when directed exploration offered the action (`explored`), "follow-through"
        when the move through the way the last action opened replaced another move (`followed`),
        "sample" when sampling picked none of those."""
        if self.chosen == self.model_best:
            return "llm"
        if self.chosen == self.posterior_best:
            return "memory"
        if self.chosen in self.explored:
            return "exploration"
        if self.followed:
            return "follow-through"
        return "repeat-avoidance" if self.avoided and self.mode == "greedy" else "sample"

    @property
    def reason(self) -> str:
        """One line for the step record."""
        i = self.actions.index(self.chosen)
        line = f"posterior {self.posterior[i]:.2f} (model {self.model_probs[i]:.2f}"
        evidence = self.memory.get(self.chosen)
        if evidence is not None:
            line += f", memory: {evidence.hint}, advantage {evidence.advantage:+.2f}, lambda {self.weights[i]:.2f}"
        line += ")"
        if self.memory_changed_argmax and self.chosen == self.posterior_best:
            line += f"; memory overrode the model's {self.model_best!r}"
        elif self.memory_changed_argmax:
            line += f"; memory preferred {self.posterior_best!r} to the model's {self.model_best!r}, passed over"
        others = {*self.held, *self.revisits, *self.undoes}
        tried = [a for a in self.avoided if a not in others and a not in self.punished]
        if tried:
            line += f"; already tried here: {', '.join(tried)}"
        held = [a for a in self.avoided if a in self.held]
        if held:
            line += f"; would undo a reward the episode holds: {', '.join(held)}"
        back = [a for a in self.avoided if a in self.revisits and a not in self.held]
        if back:
            line += f"; leads back to a place seen since the last reward: {', '.join(back)}"
        undone = [a for a in self.avoided if a in self.undoes and a not in self.held and a not in self.revisits]
        if undone:
            line += f"; would undo a change this episode made: {', '.join(undone)}"
        lost = [a for a in self.avoided if a in self.punished and a not in others]
        if lost:
            line += f"; lost points when taken earlier in this episode: {', '.join(lost)}"
        if self.chosen in self.ways_out:
            line += "; the shortest known way to a place not seen yet"
        if self.followed:
            line += "; goes through the way the last action opened"
        if self.explored:
            line += (
                "; no listed use of what is held is known to work (memory, less what this episode lost points on), "
                f"so first: {', '.join(self.explored)}"
            )
        return line

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: per action the model's probability, memory's evidence, lambda and the posterior."""
        return {
            "chosen": self.chosen,
            "model_best": self.model_best,
            "posterior_best": self.posterior_best,
            "memory_changed_argmax": self.memory_changed_argmax,
            "decided_by": self.decided_by,
            "mode": self.mode,
            **({"draw": self.config.draw} if self.config.draw else {}),
            "beta": self.config.beta,
            "alpha": self.config.alpha,
            "support_scale": self.config.support_scale,
            "explore_untried": self.config.explore_untried,
            "untried_support": self.config.untried_support,
            "untried_floor": self.config.untried_floor,
            "untried_cap": self.config.untried_cap,
            "avoided": list(self.avoided),
            **({"held": list(self.held)} if self.held else {}),
            **({"revisits": list(self.revisits)} if self.revisits else {}),
            **({"ways_out": list(self.ways_out)} if self.ways_out else {}),
            **({"undoes": list(self.undoes)} if self.undoes else {}),
            **({"punished": list(self.punished)} if self.punished else {}),
            **({"ahead": list(self.ahead)} if self.ahead else {}),
            **({"followed_through": True} if self.followed else {}),
            **({"explore_enabling": True} if self.config.explore_enabling else {}),
            **({"explored": list(self.explored)} if self.explored else {}),
            "actions": {
                a: {
                    "model": round(p, 6),
                    "lambda": round(w, 4),
                    "posterior": round(q, 6),
                    **({"memory": self.memory[a].to_dict()} if a in self.memory else {}),
                }
                for a, p, w, q in zip(self.actions, self.model_probs, self.weights, self.posterior)
            },
        }


def posterior_probs(
    model_probs: Sequence[float], advantages: Sequence[float], weights: Sequence[float], config: PosteriorConfig
) -> list[float]:
    """pi(a) proportional to p_a^beta * exp(lambda_a * A_a / alpha), normalised.

    An action the model gives probability 0 stays impossible, even at beta = 0.

    Example: p = (0.8, 0.2), A = (0, 1), lambda = (0, 0.5), beta = 1, alpha = 0.25: the
    unnormalised weights are 0.8 and 0.2 * e^2 = 1.478, so pi = (0.351, 0.649).

    Raises:
        ValueError: lengths differ, or every action has probability 0.
    """
    if not (len(model_probs) == len(advantages) == len(weights)):
        raise ValueError("model_probs, advantages and weights need one entry per action")
    logits = [
        (config.beta * math.log(p) if config.beta else 0.0) + w * a / config.alpha if p > 0 else -math.inf
        for p, a, w in zip(model_probs, advantages, weights)
    ]
    top = max(logits)
    if top == -math.inf:
        raise ValueError("every action has model probability 0; score the admissible actions first")
    exps = [math.exp(x - top) for x in logits]
    total = sum(exps)
    return [e / total for e in exps]


def decide(
    model_probs: Mapping[str, float],
    memory: Mapping[str, MemoryAdvantage],
    config: PosteriorConfig,
    rng: random.Random | None = None,
    avoid: Collection[str] | Mapping[str, int] = (),
    held: Collection[str] = (),
    first: Collection[str] = (),
    revisits: Collection[str] = (),
    ways_out: Collection[str] = (),
    undoes: Collection[str] = (),
    ahead: Collection[str] = (),
    moves: Collection[str] = (),
    punished: Collection[str] = (),
) -> PosteriorDecision:
    """Choose an action from the posterior over the scored candidates.

    Args:
        model_probs: pi_model per candidate, e.g. `dict(zip(dist.actions, dist.probs))` of an
            `ActionDistribution`.
        memory: `memory_advantages` for this state; actions missing from it get lambda 0.
        config: beta, alpha, support scale and mode.
        rng: draws in "sample" mode (seed it for reproducible runs); required there.
        avoid: actions already taken in this same situation (a deterministic game repeats its
            outcome): the choice is made among the others while any remains, so the policy
            never loops on its own argmax. Given as counts (action -> times taken here), once
            every candidate was taken the choice is among the least taken, so a situation whose
            every action was tried cycles through them instead of repeating one. The posterior
            itself is left as computed.
        held: those of `avoid` that are there because repeating them would undo a reward the
            episode still holds (`EpisodeSession.held_rewards`), so the record says why.
        first: actions to choose among before the others while any of them is open to choice
            (`agent.directed_exploration.explore_first`); the posterior itself is left as computed.
        revisits: those of `avoid` that lead back to a place seen since the last reward
            (`EpisodeSession.revisits`), so the record says why.
        ways_out: moves back that start the shortest known way to a place not seen yet
            (`EpisodeSession.ways_out`), left out of `avoid` for that reason; recorded.
        undoes: those of `avoid` that set back a thing changed since the last reward
            (`EpisodeSession.undoes`), so the record says why.
        ahead: moves through the way the last action opened (`EpisodeSession.ahead`): when the
            choice would be another of `moves`, it is made among these instead while any is open
            (recorded as `followed`).
        moves: the listed moves (`EpisodeSession.listed_moves`).
        punished: those of `avoid` that lost points when taken earlier in the episode
            (`EpisodeSession.punished`), so the record says why.

    Returns:
        The `PosteriorDecision`, with the chosen action and everything behind it.

    Raises:
        ValueError: no candidates, or "sample" mode without an rng.
    """
    if not model_probs:
        raise ValueError("decide needs at least one scored action")
    if config.mode == "sample" and rng is None:
        raise ValueError("posterior mode 'sample' needs a seeded random.Random (rng)")
    actions = list(model_probs)
    probs = [float(model_probs[a]) for a in actions]
    weights = [memory_weight(memory[a].support, config.support_scale) if a in memory else 0.0 for a in actions]
    advantages = [memory[a].advantage if a in memory else 0.0 for a in actions]
    post = posterior_probs(probs, advantages, weights, config)
    model_best = actions[_argmax(probs)]
    posterior_best = actions[_argmax(post, prefer=actions.index(model_best))]
    tries = avoid if isinstance(avoid, Mapping) else dict.fromkeys(avoid, 1)
    fewest = min(tries.get(a, 0) for a in actions)
    open_ = [i for i, a in enumerate(actions) if tries.get(a, 0) == fewest]
    avoided = [a for a in actions if tries.get(a, 0) > fewest]
    offered = [i for i in open_ if actions[i] in first]
    explored = [actions[i] for i in offered]
    open_ = offered or open_
    chosen = _pick(actions, open_, post, posterior_best, config.mode, rng)
    through = [i for i in open_ if actions[i] in ahead]
    followed = bool(through) and chosen in moves and chosen not in ahead and chosen not in explored
    if followed:
        chosen = _pick(actions, through, post, posterior_best, config.mode, rng)
    held_here = [a for a in avoided if a in held]
    back = [a for a in avoided if a in revisits]
    way_out = [a for a in actions if a in ways_out]
    undone = [a for a in avoided if a in undoes]
    opened = [actions[i] for i in through]
    lost = [a for a in avoided if a in punished]
    return PosteriorDecision(
        actions,
        probs,
        dict(memory),
        weights,
        post,
        chosen,
        model_best,
        posterior_best,
        config.mode,
        config,
        avoided,
        held_here,
        explored,
        back,
        way_out,
        undone,
        opened,
        followed,
        lost,
    )


def _pick(
    actions: Sequence[str],
    among: Sequence[int],
    post: Sequence[float],
    posterior_best: str,
    mode: Mode,
    rng: random.Random | None,
) -> str:
    """The greedy choice among these indices (the posterior's argmax on ties), or a draw by the posterior."""
    if mode == "greedy":
        best = actions.index(posterior_best)
        return actions[max(among, key=lambda i: (post[i], i == best, -i))]
    return actions[rng.choices(among, weights=[post[i] for i in among])[0]]


def _argmax(values: Sequence[float], prefer: int | None = None) -> int:
    """Index of the largest value: `prefer` when it ties the largest, else the first."""
    top = max(values)
    if prefer is not None and values[prefer] >= top - 1e-12 * max(1.0, abs(top)):
        return prefer
    return values.index(top)


@dataclass(frozen=True)
class PosteriorPolicy:
    """What the agent loop needs to act by the posterior: how to combine, and how sharp the
    model's softmax over its scored actions is (`pi_model = softmax(score / temperature)`)."""

    config: PosteriorConfig = field(default_factory=PosteriorConfig)
    temperature: float = 1.0

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError(f"the scoring temperature must be > 0, got {self.temperature}")
