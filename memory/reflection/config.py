"""Settings of the reflector (`settings.reflect`): when it runs, which model, how rules are voted,
and how rules are mined from statistics (`settings.reflect.mine`).

The vote arithmetic these knobs enter is documented in `memory.rule_editor`; what the
reflector reads and writes in `memory.reflector`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class MiningConfig(BaseModel):
    """Rules mined from the bank's statistics (`settings.reflect.mine`): a reflector with no model.

    What is mined and how it is counted is documented in `memory.reflection.mining_stats`;
    how mined rules are stored and kept up to date in `memory.reflection.mined_rules`.
    """

    model_config = ConfigDict(extra="forbid")

    min_support: int = Field(3, ge=1, description="Fewest episodes that must show a mined rule for it to be kept.")
    min_confidence: float = Field(
        0.9,
        gt=0,
        le=1,
        description="Least share of the episodes that bear on a mined rule which must agree with it "
        "(a precondition: successes of the action that had it done earlier; an ordering: episodes "
        "that reached the later sub-goal after the earlier one).",
    )
    max_p_value: float = Field(
        0.05,
        gt=0,
        le=1,
        description="A 'never led to success' rule is kept only when that many failures in a row would "
        "happen by the family's success rate alone with at most this probability.",
    )
    max_rules: int = Field(10, ge=0, description="Most mined rules kept per family, best supported first.")
    max_per_action: int = Field(
        1, ge=1, description="Most preconditions kept per action (the ones that explain the most failures)."
    )
    score: float = Field(
        2.0,
        gt=0,
        description="Score of a newly mined rule (as the reflector's add_score: mined and written rules start equal).",
    )
    include_synthetic: bool = Field(
        False, description="Mine synthetic episodes too (off: only played, environment-verified experience)."
    )
    place_pattern: str = Field(
        r"You are in (?:the |a |an )?(?P<place>[^.\n]+)|-= (?P<room>[^=\n]+?) =-",
        description="Regular expression finding where an observation is (its first non-empty group); "
        "no match: 'never led to success' rules name no place.",
    )
    max_provenance: int = Field(20, ge=1, description="Episode ids kept on a mined rule as its provenance.")
    revive_removed: bool = Field(
        False,
        description="Store again a mined rule that votes or a person removed (off: a removal stands).",
    )


class ReflectorConfig(BaseModel):
    """The reflector: rules distilled from successes and failures, maintained by votes."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(True, description="Reflect automatically during `crl run` (`--no-reflect` turns it off).")
    every: int = Field(
        10, ge=0, description="Reflect after every N finished episodes of a run (0: only on demand, `crl reflect`)."
    )
    model: str | None = Field(
        None,
        description="Model that reflects (`--reflect-model`): a hub id, folder, .gguf file or remote model name. "
        "Unset: the acting model.",
    )
    base_url: str | None = Field(
        None,
        description="OpenAI-compatible endpoint of the reflecting model; unset: the acting model's endpoint (llm.base_url).",
    )
    max_rules: int = Field(20, ge=1, description="Cap on rules per scope (a family, or a family variant).")
    max_critiques: int = Field(
        3, ge=1, description="Cap on self-critique rules kept for one game (task variant and seed)."
    )
    rule_scope: Literal["family", "variant"] = Field(
        "family",
        description="Where rules from pairs and groups of successes apply: the whole family, or only the variant they came from.",
    )
    self_critique: bool = Field(
        True,
        description="Reflect on a failure with no success yet (Reflexion-style) and keep the rules for retries of that game.",
    )
    add_score: float = Field(2.0, gt=0, description="Score of a new rule (ExpeL: 2).")
    agree_delta: float = Field(1.0, ge=0, description="Score added by AGREE / UPVOTE and by EDIT (ExpeL: +1).")
    downvote_delta: float = Field(
        1.0, ge=0, description="Score taken by DOWNVOTE, and by REMOVE while the scope is below its cap (ExpeL: 1)."
    )
    remove_full_delta: float = Field(
        3.0, ge=0, description="Score taken by REMOVE while the scope is at its cap (ExpeL: 3)."
    )
    dedupe_threshold: float = Field(
        0.85,
        gt=0,
        le=1,
        description="Cosine similarity above which a new (or edited) rule is a near-duplicate of an existing one: counted as AGREE on it.",
    )
    contradiction_threshold: float = Field(
        0.8,
        gt=0,
        le=1,
        description="Cosine similarity above which rules of opposite polarity (one negated) contradict: the one with fewer votes goes.",
    )
    max_rule_chars: int = Field(
        300, ge=20, description="Longest rule text kept; longer ones are cut at a sentence end, or rejected."
    )
    max_ops: int = Field(8, ge=1, description="Most operations accepted from one reply; the rest are rejected.")
    require_grounded: bool = Field(
        True,
        description="Reject ADD and EDIT texts that name nothing occurring in the reflected episodes (goal, "
        "observations, actions), such as the 135M model's 'Always remember to remember the rules.'",
    )
    max_inputs: int = Field(
        4,
        ge=1,
        description="Most reflections (pairs, groups, critiques) per run of the reflector; the rest wait for the next run.",
    )
    group_size: int = Field(3, ge=2, description="Successes on one task compared together in a group.")
    batch_size: int = Field(
        4, ge=1, description="Reflection prompts generated in one batch (all see the same rule set)."
    )
    max_steps_shown: int = Field(
        12, ge=2, description="Steps of an episode shown in the prompt (first and last halves)."
    )
    max_observation_chars: int = Field(160, ge=20, description="Longest observation shown per step.")
    max_new_tokens: int = Field(
        160, ge=16, description="Most tokens the reflecting model writes per reply (8 operations fit)."
    )
    prime: str | None = Field(
        None,
        description="Start of the reply written for a model that continues a partial reply (the local backend), e.g. "
        "'ADD: Always'. Unset: 'ADD: Always' for the embedded 135M model (measured: unprimed it writes prose, primed "
        "with 'ADD:' it copies the format line), none for other models. Empty: no priming.",
    )
    temperature: float = Field(0.0, ge=0, description="Sampling temperature of the reflecting model (0: greedy).")
    seed: int | None = Field(0, description="Sampling seed of the reflecting model.")
    strip_instructions: bool = Field(
        True,
        description="Poisoning defence: replace instruction-like spans of stored text (`prompts.untrusted`) in what "
        "the reflector reads, and refuse a rule whose text is instruction-like or copies such a span.",
    )
    verified_only: bool = Field(
        True,
        description="Poisoning defence: an episode that claims success without the environment having verified it "
        "is not reflected on (as a success or at all), nor mined.",
    )
    mine: MiningConfig = Field(
        default_factory=MiningConfig,
        description="Rules mined from the bank's statistics (preconditions, orderings, dead ends), no model needed.",
    )

    @model_validator(mode="after")
    def _check_thresholds(self):
        if self.contradiction_threshold > self.dedupe_threshold:
            raise ValueError(
                "reflect.contradiction_threshold must not exceed reflect.dedupe_threshold "
                "(a negated near-duplicate must be seen as a contradiction, not as agreement)"
            )
        return self
