"""Settings of the retriever, the reranker and episodic control (`settings.retrieval`).

The formulas these knobs enter are documented where they are used: the rerank score in
`memory.rerank`, action values and the mixed policy in `memory.episodic_control`, credit in
`memory.credit`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class RerankWeights(BaseModel):
    """Weights of the rerank score (see `memory.rerank`): each term is in [-1, 1] or [0, 1].

    Why these defaults: MiniLM similarities between states of one task family sit in
    0.7-1.0 (keyroom: 0.93 for consecutive states of one world, 0.67-0.89 across worlds),
    so similarity leads and outcome, value and recency only break near-ties (a stored
    state from a success 0.1 less similar must not outrank this very state from a
    failure). Utility, the learned signal, weighs most after similarity.
    """

    model_config = ConfigDict(extra="forbid")

    similarity: float = Field(
        1.0, ge=0, description="Cosine similarity to the query state (or cross-encoder relevance)."
    )
    outcome: float = Field(
        0.05, ge=0, description="Discounted outcome: gamma^(steps to the end) after a success, 0 after a failure."
    )
    utility: float = Field(
        0.3,
        ge=0,
        description="Utility advantage: how much more often using the memory preceded success than the family's rate.",
    )
    value: float = Field(0.05, ge=0, description="The memory's value label (tags at ingest, EMA-smoothed by credit).")
    recency: float = Field(0.02, ge=0, description="0.5 ** (age in days / recency_half_life_days).")
    rule_score: float = Field(
        0.2,
        ge=0,
        description="Rules only: weight of the reflector's vote score, capped at 10 points and scaled to [0, 1].",
    )


class RetrievalConfig(BaseModel):
    """What the retriever brings back each step, how it ranks it, and episodic control."""

    model_config = ConfigDict(extra="forbid")

    pool: int = Field(
        50, ge=1, description="Candidates fetched by embedding similarity per query and kind before reranking."
    )
    k_success: int = Field(2, ge=0, description="Successful episodes put in the prompt (`--k-success`).")
    k_failure: int = Field(1, ge=0, description="Failed episodes put in the prompt, for contrast (`--k-failure`).")
    k_hints: int = Field(3, ge=0, description="Step hints: what was done in the most similar stored states.")
    k_rules: int = Field(5, ge=0, description="Rules in scope put in the prompt.")
    epsilon: float = Field(
        0.05,
        ge=0,
        le=1,
        description="Chance that one slot goes to a novel or rarely used memory instead (`--epsilon`).",
    )
    weights: RerankWeights = Field(default_factory=RerankWeights, description="Weights of the rerank score.")
    utility_prior: float = Field(
        2.0,
        gt=0,
        description="Pseudo-uses at the family's success rate that shrink a rarely used memory's utility toward 0 advantage.",
    )
    mmr_lambda: float = Field(
        0.7,
        ge=0,
        le=1,
        description="MMR trade-off: 1 ranks by score alone, lower values penalise near-duplicates more.",
    )
    recency_half_life_days: float = Field(7.0, gt=0, description="Age at which the recency term halves.")
    use_utility: bool = Field(True, description="Rank by learned utility (`--no-utility` turns it off).")
    rerank: Literal["default", "cross-encoder"] = Field(
        "default",
        description="'cross-encoder' replaces the similarity term by a CrossEncoder's relevance (`--rerank`).",
    )
    cross_encoder_model: str | None = Field(
        None,
        description="Folder (or cached name) of a sentence-transformers CrossEncoder; needed for rerank='cross-encoder'.",
    )
    cross_encoder_pool: int = Field(
        20,
        ge=1,
        description="Candidates per query and kind, best by embedding similarity, that the cross-encoder scores.",
    )
    query_threads: int = Field(
        2,
        ge=1,
        description="Threads that run one decision's independent bank reads (success and failure episodes, "
        "steps, rules) at the same time; 1 runs them one after another.",
    )
    ec_neighbours: int = Field(
        20, ge=1, description="Episodic control: nearest stored steps of the family that vote on action values."
    )
    ec_gamma: float = Field(
        0.9,
        gt=0,
        le=1,
        description="Discount per step between an action and its episode's end (also in the rerank outcome term).",
    )
    ec_min_similarity: float = Field(
        0.5,
        ge=-1,
        lt=1,
        description="Stored states less similar than this do not vote; the vote weight rises linearly from 0 here to 1 at identity.",
    )
    ec_invalid_penalty: float = Field(
        1.0, ge=0, le=1, description="Value an invalid stored action counts with, negated."
    )
    ec_loop_penalty: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Value an action repeated in the same situation (crl.tasks.situations) counts with, negated; also what `choose_memory` subtracts from actions already tried here.",
    )
    ec_loop_erasure: bool = Field(
        False,
        description="Loop-erased credit: a stored step its episode later came back around (StepRecord.detour: "
        "the take of a bottle dropped again, a walk out and back) earns no success or sub-goal credit (value 0 "
        "in a success; a failure's value unchanged), so a detour that happened to precede a win does not vote for itself.",
    )
    ec_subgoal_value: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Value of reaching a sub-goal (info['subgoals']) d steps later, times gamma^d; credits the steps toward it even in a failed episode. 0 turns it off.",
    )
    ec_partial_weight: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Weight of a stored action matching an admissible one by verb and last word only (take brass key ~ take iron key); 0 maps exact text only.",
    )
    ec_analogy: bool = Field(
        True,
        description="Analogical values (memory.retrieval.analogy, memory.retrieval.analogous_values): a stored "
        "'VERB OBJECT PREP TARGET' votes for the admissible actions with the same verb, preposition and target, "
        "weighted by how alike the two objects' embeddings are, instead of by verb and last word; every such step of "
        "the task votes, from any state, where the nearest states did not vote for the action itself (for tasks "
        "whose objects never recur between worlds). On by default: measured to help twc and to change no game "
        "of keyroom/key, keyroom/compound or twx/coin.",
    )
    ec_analogy_min_similarity: float = Field(
        0.3,
        ge=-1,
        lt=1,
        description="Analogical matching: objects less similar than this do not vote; the weight rises linearly to 1 at identity.",
    )
    ec_action_roles: bool = Field(
        True,
        description="Match stored actions to admissible ones by the role the task gives them (TaskSpec.action_role: 'go through the open door' in any world) where both have one; false matches by text only.",
    )
    ec_optimism: float = Field(
        0.1,
        ge=-1,
        le=1,
        description="Prior value of an action with no stored experience (`--policy memory` explores what it has not tried).",
    )
    ec_prior_weight: float = Field(
        1.0,
        gt=0,
        description="Pseudo-support of the optimistic prior when `choose_memory` shrinks thin evidence toward it.",
    )
    mixed_threshold: float = Field(
        0.3,
        ge=0,
        le=2,
        description="Mixed policy: how much higher memory's best value must be than the model action's to override it.",
    )
    mixed_min_support: float = Field(
        1.5,
        ge=0,
        description="Mixed policy: the similarity weight (about: near-identical stored states) memory's best action needs to override.",
    )

    defences: bool = Field(
        True,
        description="Memory-poisoning defences as a whole (`memory.retrieval.influence`); false turns every one "
        "below off (for measuring them: `python bench/attack_suite.py`).",
    )
    sanitise_memory: bool = Field(
        True,
        description="Replace instruction-like spans of retrieved text (`prompts.untrusted.INSTRUCTION_PATTERNS`) by "
        "'[instruction removed]' before it reaches the prompt.",
    )
    verified_only: bool = Field(
        True,
        description="Only environment-verified successes count as successes: an unverified claim of success "
        "(an import, a forged record) is no success case, no hint, and no vote in episodic control.",
    )
    max_source_share: float = Field(
        0.34,
        gt=0,
        le=1,
        description="Most share of the support behind one action value that one source (a run or an import; each "
        "verified episode is its own source) may hold; the prior pseudo-support `ec_prior_weight` counts as "
        "another source. 1 turns the cap off.",
    )
    outlier_weight: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Factor on the vote of an outlier: an unverified record whose return disagrees by more than "
        "`outlier_tolerance` with verified records of the same action in near-identical states "
        "(similarity >= `outlier_similarity`), or that claims success where verified records of it only failed. 1: "
        "flag only.",
    )
    outlier_similarity: float = Field(
        0.9, gt=0, le=1, description="States at least this similar count as the same state for the outlier check."
    )
    outlier_tolerance: float = Field(
        0.5, gt=0, le=2, description="Largest gap between a record's return and its verified peers' mean return."
    )

    def defence(self, name: str) -> bool:
        """Whether the defence `name` (sanitise_memory, verified_only, ...) is on, `defences` included."""
        return self.defences and bool(getattr(self, name))

    @property
    def source_share(self) -> float:
        """The source cap in force: `max_source_share`, or 1 with the defences off."""
        return self.max_source_share if self.defences else 1.0

    @property
    def outlier_factor(self) -> float:
        """The factor on outliers' votes in force: `outlier_weight`, or 1 with the defences off."""
        return self.outlier_weight if self.defences else 1.0

    @model_validator(mode="after")
    def _check_cross_encoder(self):
        if self.rerank == "cross-encoder" and not self.cross_encoder_model:
            raise ValueError(
                "rerank = 'cross-encoder' needs retrieval.cross_encoder_model: a local sentence-transformers "
                "CrossEncoder folder (or use rerank = 'default')"
            )
        return self
