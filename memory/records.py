"""What the experience bank stores: episode, step and rule records, their ids and state text.

Records cross boundaries (the Chroma view, export files, imports), so they are pydantic
models with `extra="forbid"` and no NaN, each carrying `schema_version`. Ids are
deterministic, so ingesting the same log twice writes the same records:

    >>> episode_record_id("keyroom", "r1-0003")
    'ep:keyroom:r1-0003'
    >>> step_record_id("keyroom", "r1-0003", 4)
    'st:keyroom:r1-0003:4'
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import typing
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from crl.memory.trajectory import Episode, Step

SCHEMA_VERSION = 2

Outcome = Literal["success", "failure", "unfinished"]
Tier = Literal["golden", "regular", "quarantine"]
Source = Literal["real", "synthetic"]
Review = Literal["pending", "accepted", "rejected"]
Kind = Literal["episode", "step", "rule"]
KINDS: tuple[str, ...] = ("episode", "step", "rule")
RULE_SCOPE_ALL = "all"

_ID_PREFIX = {"episode": "ep", "step": "st", "rule": "ru"}
_PREFIX_KIND = {v: k for k, v in _ID_PREFIX.items()}

FAMILY_MAX = 32
_FAMILY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*(?:\.[A-Za-z0-9_-]+)*")
ID_MAX = 160
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+@=-]*")


def family_problem(family: str) -> str | None:
    """Why `family` cannot name a task family in the bank (its collections are named after it), or None.

    Example:
        >>> family_problem("x..y")
        "task family 'x..y' may hold letters, digits, '_', '-' and single dots between them (at most 32)"
    """
    if isinstance(family, str) and len(family) <= FAMILY_MAX and _FAMILY.fullmatch(family):
        return None
    return (
        f"task family {family!r} may hold letters, digits, '_', '-' and single dots between them (at most {FAMILY_MAX})"
    )


def id_problem(what: str, value: str) -> str | None:
    """Why `value` cannot be an episode or run id (`what` names which), or None: ids are one word of
    letters, digits and `_ . + @ = -`, as record ids embed them between colons."""
    if isinstance(value, str) and len(value) <= ID_MAX and _ID.fullmatch(value) and ".." not in value:
        return None
    return f"{what} {value!r} must be letters, digits and _ . + @ = - (no '..', at most {ID_MAX} characters)"


def episode_record_id(family: str, episode_id: str) -> str:
    """The record id of episode `episode_id` of task family `family`."""
    return f"ep:{family}:{episode_id}"


def step_record_id(family: str, episode_id: str, index: int) -> str:
    """The record id of step `index` of episode `episode_id`."""
    return f"st:{family}:{episode_id}:{index}"


def rule_record_id(scope: str, text: str, variant: str | None = None, seed: int | None = None) -> str:
    """The record id of a rule first written as `text` for `scope` (kept when the text is edited).

    A rule limited to a task variant (and seed) hashes those too, so the same text may be
    a rule of the family and, separately, of one game.
    """
    key = f"{scope}\n{text}" if variant is None and seed is None else f"{scope}\n{variant}\n{seed}\n{text}"
    digest = hashlib.sha1(key.encode()).hexdigest()[:12]
    return f"ru:{scope}:{digest}"


def parse_record_id(record_id: str) -> tuple[str, str, str]:
    """Split a record id into (kind, family or rule scope, rest).

    Raises:
        ValueError: `record_id` is not an ep:/st:/ru: id.
    """
    prefix, _, tail = record_id.partition(":")
    family, _, rest = tail.partition(":")
    if prefix not in _PREFIX_KIND or not family or not rest:
        raise ValueError(
            f"{record_id!r} is not a memory record id (ep:FAMILY:EPISODE, st:FAMILY:EPISODE:INDEX or ru:SCOPE:HASH)"
        )
    return _PREFIX_KIND[prefix], family, rest


def episode_of_step(step_id: str) -> str:
    """The episode record id a step record id belongs to."""
    kind, family, rest = parse_record_id(step_id)
    if kind != "step":
        raise ValueError(f"{step_id!r} is not a step id")
    return episode_record_id(family, rest.rsplit(":", 1)[0])


def state_text(goal: str, observation: str, history: list[str]) -> str:
    """The text a step is embedded and retrieved by: goal, recent actions, observation.

    The retriever must build its queries with this same function.

    Example:
        >>> print(state_text("Open the door.", "A hall.", ["take key"]))
        Goal: Open the door.
        Recent actions: take key
        Observation: A hall.
    """
    lines = [f"Goal: {goal}"]
    if history:
        lines.append("Recent actions: " + " | ".join(history))
    lines.append(f"Observation: {observation}")
    return "\n".join(lines)


def _trajectory_step_model() -> type[BaseModel]:
    """A pydantic twin of `Step` (strict, no NaN), built from its fields so the two never drift."""
    hints = typing.get_type_hints(Step)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(Step):
        if f.default is not dataclasses.MISSING:
            default: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = Field(default_factory=f.default_factory)
        else:
            default = ...
        fields[f.name] = (hints[f.name], default)
    return create_model("TrajectoryStep", __config__=ConfigDict(extra="forbid", allow_inf_nan=False), **fields)


TrajectoryStep = _trajectory_step_model()


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, validate_assignment=False)

    schema_version: int = SCHEMA_VERSION
    id: str
    tier: Tier = "regular"
    tags: list[str] = Field(default_factory=list, description="User labels (curation).")
    source: Source = "real"
    value: float = Field(0.0, description="Value label, EMA-smoothed when the memory is used.")
    use_count: int = Field(0, ge=0, description="How many episodes used this memory.")
    use_successes: int = Field(0, ge=0, description="How many of those episodes succeeded.")
    utility: float = Field(0.5, ge=0, le=1, description="(use_successes + 1) / (use_count + 2).")
    created_at: float
    updated_at: float
    last_used_at: float | None = None
    credit_actor: str | None = Field(
        None,
        description="The actor (base model + adapter, `memory.actors.actor_key`) whose episode credited this "
        "memory last; None: never credited, or credited before credit carried the actor.",
    )
    credit_uses: float | None = Field(
        None,
        ge=0,
        description="Uses still counted after decay at promotions (None: never decayed, so use_count).",
    )
    credit_wins: float | None = Field(
        None,
        ge=0,
        description="Successful uses still counted after decay at promotions (None: never decayed, so use_successes).",
    )
    value_prior: float | None = Field(
        None, description="The value label before its first credit: where decay pulls the value back to."
    )
    verified: bool = Field(
        False,
        description="The outcome was checked by the environment: an episode played here (verified_by 'env'), "
        "a synthetic one validated by replay ('replay'), or vouched for by a curator ('curator:WHO'). "
        "Only verified successes count as successes (`counts_as_success`).",
    )
    verified_by: str | None = Field(None, description="Who verified the outcome: env, replay or curator:WHO.")
    imported_from: str | None = Field(
        None, description="The import it came from (`imports/<digest>.jsonl` in the memory folder); None: made here."
    )
    review: Review | None = Field(
        None,
        description="pending: an import waiting for `crl memory review` (kept in quarantine until then); "
        "accepted or rejected: the curator's decision. None: never needed review.",
    )
    namespace: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9]{1,64}$",
        description="The memory namespace an exported record came from (in export files only: in the bank a "
        "record's namespace is the set of collections it lives in, `memory.storage.namespaces`).",
    )

    @property
    def effective_uses(self) -> float:
        """Uses that still count: `credit_uses` once decayed, else `use_count`."""
        return float(self.use_count if self.credit_uses is None else self.credit_uses)

    @property
    def effective_wins(self) -> float:
        """Successful uses that still count: `credit_wins` once decayed, else `use_successes`."""
        return float(self.use_successes if self.credit_wins is None else self.credit_wins)

    @model_validator(mode="after")
    def _check_version(self):
        if self.schema_version != SCHEMA_VERSION:
            raise ValueError(f"schema_version {self.schema_version} is not {SCHEMA_VERSION}; migrate the record first")
        if self.use_successes > self.use_count:
            raise ValueError("use_successes cannot exceed use_count")
        return self


class EpisodeRecord(_Record):
    """One whole episode with its outcome and tags."""

    kind: Literal["episode"] = "episode"
    episode_id: str
    run_id: str
    task: str
    family: str
    variant: str
    seed: int
    goal: str
    model: str = ""
    adapter: str | None = None
    status: str = Field(description="running (unfinished), done, truncated or error.")
    end_reason: str = ""
    outcome: Outcome
    success: bool
    total_return: float
    length: int = Field(ge=0, description="Number of steps.")
    invalid_steps: int = Field(0, ge=0)
    reward_sparsity: float = Field(ge=0, le=1, description="Share of steps with zero reward.")
    novelty: float = Field(ge=0, le=1, description="Mean novelty of the episode's states.")
    skills: list[str] = Field(default_factory=list, description="Sub-goals reached by the end.")
    ended_at: float | None = None
    provenance: dict[str, Any] | None = Field(
        None, description="Synthetic episodes only: how they were made and from which episodes."
    )
    text: str = Field(description="The text the episode is embedded by: its first state.")
    trajectory: list[TrajectoryStep] = Field(default_factory=list)  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _check_id(self):
        problem = family_problem(self.family)
        if problem:
            raise ValueError(problem)
        if self.id != episode_record_id(self.family, self.episode_id):
            raise ValueError(f"id {self.id!r} does not match family and episode_id")
        return self

    def to_episode(self) -> Episode:
        """The stored episode as a `memory.trajectory.Episode`, its trajectory included."""
        return Episode(
            episode_id=self.episode_id,
            run_id=self.run_id,
            task=self.task,
            seed=self.seed,
            goal=self.goal,
            model=self.model,
            adapter=self.adapter,
            source=self.source,
            provenance=self.provenance,
            steps=[Step.from_dict(s.model_dump()) for s in self.trajectory],
            status=self.status,
            success=self.success,
            total_return=self.total_return,
            subgoals=dict.fromkeys(self.skills, True),
            end_reason=self.end_reason,
            started_at=self.created_at,
            ended_at=self.ended_at,
        )


class StepRecord(_Record):
    """One step: the state the agent was in and what it did there."""

    kind: Literal["step"] = "step"
    episode_id: str
    run_id: str
    task: str
    family: str
    variant: str
    seed: int
    index: int = Field(ge=0)
    goal: str
    observation: str
    history: list[str] = Field(default_factory=list, description="Previous actions, oldest first.")
    action: str
    thought: str = ""
    valid: bool = True
    reward: float = 0.0
    done: bool = False
    skills: list[str] = Field(default_factory=list, description="Sub-goals first reached by this step.")
    episode_outcome: Outcome
    episode_return: float
    novelty: float = Field(ge=0, le=1)
    model: str = ""
    adapter: str | None = None
    episode_length: int | None = Field(
        None, ge=1, description="Steps in the episode when stored (None in records stored before this field)."
    )
    repeated: bool = Field(
        False,
        description="The same action was taken in the same situation (`crl.tasks.situations`) earlier in the "
        "episode (a loop).",
    )
    detour: bool = Field(
        False,
        description="The step lies on a cycle of its episode: a later step stood in the situation this one was "
        "taken in, so loop erasure leaves it off the path the episode took to its end.",
    )
    unneeded: bool = Field(
        False,
        description="The step's won episode, replayed without it (and loop-erased), is still won: its win did not "
        "need it (`memory.synthesis.minimal`; marked only with `memory.minimal_credit`).",
    )
    subgoal_in: int | None = Field(
        None,
        ge=0,
        description="Steps from this one to the next that reached a sub-goal (0: this one did); None if none did.",
    )
    purpose: str | None = Field(
        None, description="The sub-goal this step worked toward (`memory.purpose`); None where the task declares none."
    )
    purpose_in: int | None = Field(
        None, ge=0, description="Steps from this one until its purpose was reached (0: this one did); None if never."
    )

    @model_validator(mode="after")
    def _check_id(self):
        problem = family_problem(self.family)
        if problem:
            raise ValueError(problem)
        if self.id != step_record_id(self.family, self.episode_id, self.index):
            raise ValueError(f"id {self.id!r} does not match family, episode_id and index")
        return self

    @property
    def steps_to_end(self) -> int | None:
        """Steps taken after this one until the episode ended (0 for the last), if known."""
        if self.episode_length is None:
            return None
        return max(0, self.episode_length - 1 - self.index)

    @property
    def text(self) -> str:
        """The state text this step is embedded by."""
        return state_text(self.goal, self.observation, self.history)


class RuleRecord(_Record):
    """A short natural-language insight, scoped to a task family (or 'all')."""

    kind: Literal["rule"] = "rule"
    text: str
    scope: str = RULE_SCOPE_ALL
    score: float = 1.0
    provenance: list[str] = Field(default_factory=list, description="Episode record ids it came from.")
    variant: str | None = Field(None, description="Task variant the rule is limited to (None: the whole scope).")
    seed: int | None = Field(
        None, description="Task seed (one game) the rule is limited to: a self-critique kept for retries of that game."
    )
    model: str = Field("", description="The model that wrote the rule (empty: written by a person).")
    reflections: list[str] = Field(default_factory=list, description="Reflection runs that created or changed it.")

    @model_validator(mode="after")
    def _check_id(self):
        kind, scope, _ = parse_record_id(self.id)
        if kind != "rule" or scope != self.scope:
            raise ValueError(f"id {self.id!r} is not a rule id of scope {self.scope!r}")
        return self

    @property
    def family(self) -> str:
        return self.scope

    @property
    def scope_label(self) -> str:
        """Where the rule applies, e.g. `keyroom`, `keyroom/key` or `keyroom/key#3` (one game)."""
        label = self.scope if self.variant is None else f"{self.scope}/{self.variant}"
        return label if self.seed is None else f"{label}#{self.seed}"

    def applies_to(self, family: str, variant: str | None = None, seed: int | None = None) -> bool:
        """Whether the rule belongs in prompts for a game of `family`/`variant` with `seed`.

        A rule for 'all' or the whole family applies to every game of it; one limited to a
        variant (or a seed) only to that variant (and seed). An unknown variant or seed
        (None) matches only rules not limited by it.
        """
        if self.scope not in (family, RULE_SCOPE_ALL):
            return False
        if self.variant is not None and self.variant != variant:
            return False
        return self.seed is None or self.seed == seed


Record = Annotated[EpisodeRecord | StepRecord | RuleRecord, Field(discriminator="kind")]
AnyRecord = EpisodeRecord | StepRecord | RuleRecord
RECORD_TYPES: dict[str, type[_Record]] = {"episode": EpisodeRecord, "step": StepRecord, "rule": RuleRecord}


def record_from_dict(data: dict[str, Any]) -> AnyRecord:
    """Validate a record dict (with its `kind`) into its model."""
    kind = data.get("kind")
    if kind not in RECORD_TYPES:
        raise ValueError(f"unknown record kind {kind!r}; expected one of {', '.join(KINDS)}")
    return RECORD_TYPES[kind].model_validate(data)  # type: ignore[return-value]


def counts_as_success(record: AnyRecord) -> bool:
    """Whether a record may count as a success (for retrieval, action values, rules and SFT/DPO
    'chosen'): a success whose outcome was verified, not in quarantine (so not an import waiting
    for review, nor a rejected one). Rules have no outcome: always False.

    Example:
        A real episode ingested from a run's log that succeeded counts; the same episode imported
        from a file does not until a curator accepts it (`crl memory review --accept ID`).
    """
    if isinstance(record, EpisodeRecord):
        outcome = record.outcome
    elif isinstance(record, StepRecord):
        outcome = record.episode_outcome
    else:
        return False
    return outcome == "success" and record.verified and record.tier != "quarantine" and record.review != "rejected"


def is_untrusted(record: AnyRecord) -> bool:
    """Whether a record waits for review or was rejected by a curator (keep it out of everything)."""
    return record.review in ("pending", "rejected")


def utility_of(use_count: float, use_successes: float) -> float:
    """Laplace-smoothed share of uses that preceded a success: 0.5 when never used."""
    return (use_successes + 1) / (use_count + 2)
