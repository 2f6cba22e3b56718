"""Trajectory records: what happened in one episode, step by step.

These are the records the agent writes to the per-run episode log and that the experience
bank is built from. They know nothing of the agent that produced them.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field, fields
from typing import Any

from crl.prompts.report import PromptReport

LOG_SCHEMA_VERSION = 1


def _split(cls: type, data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`data` as (keys that are fields of `cls`, the other keys)."""
    names = {f.name for f in fields(cls)} - {"unknown"}
    return {k: v for k, v in data.items() if k in names}, {k: v for k, v in data.items() if k not in names}


def _fields_dict(record: Any) -> dict[str, Any]:
    """Every field of `record` but `unknown`, then the unknown keys it was read with."""
    out = {f.name: getattr(record, f.name) for f in fields(record) if f.name != "unknown"}
    return out | record.unknown


@dataclass
class PolicyDecision:
    """How the policy chose a step's action (logged when a policy other than the model alone
    was in play: memory, mixed).

    Attributes:
        decided_by: who chose: "llm", "memory", ... (the step's `decided_by` before any loop break).
        reason: why, in words (e.g. "best value 0.80 with support 4.0").
        model_action: the action the model proposed, or None when it was not asked or unusable.
        posterior: the posterior policy's decision (`agent.posterior.PosteriorDecision.to_dict`):
            per action the model's probability, memory's advantage and support, and the posterior.
        unknown: logged keys this version does not know, kept as they were.
    """

    decided_by: str
    reason: str = ""
    model_action: str | None = None
    posterior: dict[str, Any] | None = None
    unknown: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The logged form (`posterior` only when the posterior policy decided)."""
        out = _fields_dict(self)
        if out.get("posterior") is None:
            out.pop("posterior", None)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PolicyDecision":
        """The decision from its logged form."""
        known, unknown = _split(cls, data)
        known.setdefault("decided_by", "")
        return cls(**known, unknown=unknown)


@dataclass
class LoopBreak:
    """The loop breaker replaced a reply already given in the same situation.

    Attributes:
        replaced: the action (or unusable reply) that was replaced.
        unknown: logged keys this version does not know, kept as they were.
    """

    replaced: str
    unknown: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The logged form."""
        return _fields_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LoopBreak":
        """The loop break from its logged form."""
        known, unknown = _split(cls, data)
        known.setdefault("replaced", "")
        return cls(**known, unknown=unknown)


@dataclass
class MemoryOffer:
    """What memory offered at a step (the retriever's `ContextPack.to_dict`), for `crl explain`.

    Attributes:
        memories: the retrieved memories, each with its id, slot, score, breakdown and reason.
        action_values: admissible action -> its value, support, counts and hint.
        explored: the slot that got the exploration slot, if any.
        baseline: the family's success rate the utility terms were relative to.
        unknown: logged keys this version does not know, kept as they were.
    """

    memories: list[dict[str, Any]] = field(default_factory=list)
    action_values: dict[str, dict[str, Any]] = field(default_factory=dict)
    explored: str | None = None
    baseline: float | None = None
    unknown: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The logged form."""
        return _fields_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "MemoryOffer":
        """The offer from its logged form (or from `ContextPack.to_dict()`)."""
        known, unknown = _split(cls, data)
        return cls(**known, unknown=unknown)


@dataclass
class ToolCallRecord:
    """A tool call the step made, and what came of it (the step's action is its canonical text,
    `name {json arguments}`).

    Attributes:
        name: the tool called (as written, when no such tool exists).
        arguments: the arguments, parsed (None when they could not be read).
        mode: "native" (the API's tool calls) or "react" (written as text and parsed).
        status: "ok", "error" (the tool raised), "timeout", "invalid" (arguments do not fit the
            schema), "unknown" (no such tool), "unreadable" (no call could be read) or
            "answer" (`final_answer`: the argument went to the task, which checked it).
        result: what the model was shown: the tool's result or why the call failed.
        call_id: the native call's id (the tool turn answers it).
        seconds: how long the tool ran.
        cached: the outcome was replayed from an earlier execution with the same idempotency key.
        memory_ids: the stored memories the tool showed (`recall`); credited with the episode.
        unknown: logged keys this version does not know, kept as they were.
    """

    name: str
    arguments: dict[str, Any] | None = None
    mode: str = "react"
    status: str = "ok"
    result: str = ""
    call_id: str | None = None
    seconds: float = 0.0
    cached: bool = False
    memory_ids: list[str] | None = None
    unknown: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The logged form (`memory_ids` only when the tool showed memories)."""
        out = _fields_dict(self)
        if not out.get("memory_ids"):
            out.pop("memory_ids", None)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ToolCallRecord":
        """The call from its logged form."""
        known, unknown = _split(cls, data)
        known.setdefault("name", "")
        return cls(**known, unknown=unknown)


_NESTED = {
    "prompt": PromptReport,
    "memory": MemoryOffer,
    "policy": PolicyDecision,
    "loop_break": LoopBreak,
    "tool": ToolCallRecord,
}


@dataclass
class StepExtra:
    """What a step records besides its core fields: how the reply was read, the prompt, what
    memory offered, who decided, and the notes the next prompt shows.

    Every field is optional; the logged form (`to_dict`) holds the fields that are set, in
    this order, then any unknown keys. Logs written before this record existed hold the same
    keys in a plain dict, so they load unchanged (`from_dict`).

    Attributes:
        match: how the reply's action was matched to a valid one ("exact", "fuzzy", "none", ...).
        raw_action: the action as the reply wrote it, before matching.
        prompt: how the prompt was fitted (absent when the model was not asked).
        memory: what memory offered at this step (absent without memory in the loop).
        policy: how the policy chose the action (absent when the model alone decided).
        loop_break: set when the loop breaker replaced a repeated reply.
        feedback: why the reply could not be used (the next prompt's note).
        repeat: how many times this action was taken in this same situation before.
        tool: the tool call the step made and its outcome (tool-using tasks only).
        unknown: keys this version does not know, kept so that nothing is lost.
    """

    match: str | None = None
    raw_action: str | None = None
    prompt: PromptReport | None = None
    memory: MemoryOffer | None = None
    policy: PolicyDecision | None = None
    loop_break: LoopBreak | None = None
    feedback: str | None = None
    repeat: int | None = None
    tool: ToolCallRecord | None = None
    unknown: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The logged form: the fields that are set, then the unknown keys.

        Example:
            >>> StepExtra(match="exact", raw_action="look", repeat=1).to_dict()
            {'match': 'exact', 'raw_action': 'look', 'repeat': 1}
        """
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "unknown" or value is None:
                continue
            out[f.name] = value.to_dict() if f.name in _NESTED else value
        return out | self.unknown

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "StepExtra":
        """The extras from their logged form, the current one or the plain dict of older logs.

        Example:
            >>> StepExtra.from_dict({"raw_action": "look", "policy": {"decided_by": "memory"}}).policy.decided_by
            'memory'
        """
        known, unknown = _split(cls, data)
        for name, record in _NESTED.items():
            value = known.get(name)
            if isinstance(value, dict):
                known[name] = record.from_dict(value)
        return cls(**known, unknown=unknown)

    @classmethod
    def coerce(cls, value: Any) -> "StepExtra":
        """`value` as a `StepExtra`: itself, or read from a dict (`from_dict`)."""
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            return cls.from_dict(value)
        raise TypeError(f"step extras must be a StepExtra or a dict, not {type(value).__name__}")

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """Let pydantic models (the bank's `TrajectoryStep`) hold step extras: read with
        `coerce`, written with `to_dict`, so the bank stores what the episode log stores."""
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(
            cls.coerce, serialization=core_schema.plain_serializer_function_ser_schema(lambda extra: extra.to_dict())
        )


@dataclass
class Step:
    """One agent step.

    Attributes:
        index: 0-based position in the episode.
        observation: the observation text the agent acted on.
        admissible_actions: what the environment accepted at that point, when known.
        raw_output: the model's reply exactly as generated.
        thought: the parsed thought ("" when the reply had none).
        action: the action sent to the environment ("" when the reply could not be parsed).
        valid: False when the reply was unparseable or inadmissible (an "invalid action" step).
        reward: reward returned by the environment for this step.
        done: whether the episode ended with this step.
        info: the environment's info dict (sub-goals, success, ...).
        prompt_tokens / completion_tokens: token accounting for this step's generation.
        latency_s: wall time of generation for this step (shared by the batch it was in).
        decided_by: which policy chose the action ("llm", "memory", "scripted", "random", ...).
        extra: the typed extras (`StepExtra`): prompt report, memory offered, policy decision,
            feedback, loop break, repeats, tool call. A dict given here is read with `StepExtra.from_dict`.
        time: when the step was logged (UNIX seconds).
    """

    index: int
    observation: str
    action: str
    raw_output: str = ""
    thought: str = ""
    admissible_actions: list[str] | None = None
    valid: bool = True
    reward: float = 0.0
    done: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    decided_by: str = "llm"
    extra: StepExtra = field(default_factory=StepExtra)
    time: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        self.extra = StepExtra.coerce(self.extra)

    def to_dict(self) -> dict[str, Any]:
        """The step as logged: every field, the extras in their logged form (`StepExtra.to_dict`)."""
        return {
            f.name: copy.deepcopy(self.extra.to_dict() if f.name == "extra" else getattr(self, f.name))
            for f in fields(self)
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Step":
        """A step from its logged form; older logs' plain-dict extras load unchanged."""
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass
class Episode:
    """One episode: who played what, every step, and how it ended.

    `status` is "running" until the episode ends, then "done" (the environment said so),
    "truncated" (a guard stopped it: max steps, token budget, wall clock) or "error".
    `provenance` is set on synthetic episodes only (`crl.memory.synthesis`): how they were made
    and from which episodes. `game` names the game the seed started where the environment can
    tell (`crl.tasks.game_identity`): equal for seeds that start the same game.
    """

    episode_id: str
    run_id: str
    task: str
    seed: int
    goal: str
    model: str = ""
    adapter: str | None = None
    source: str = "real"
    provenance: dict[str, Any] | None = None
    game: str | None = None
    steps: list[Step] = field(default_factory=list)
    status: str = "running"
    success: bool = False
    total_return: float = 0.0
    subgoals: dict[str, bool] = field(default_factory=dict)
    end_reason: str = ""
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None

    @property
    def family(self) -> str:
        return self.task.split("/", 1)[0]

    @property
    def variant(self) -> str:
        return self.task.split("?", 1)[0].split("/", 1)[-1]

    @property
    def finished(self) -> bool:
        return self.status != "running"

    @property
    def invalid_steps(self) -> int:
        return sum(1 for s in self.steps if not s.valid)

    def header(self) -> dict[str, Any]:
        """The fields that describe the episode without its steps or outcome."""
        return (
            {
                "episode_id": self.episode_id,
                "run_id": self.run_id,
                "task": self.task,
                "seed": self.seed,
                "goal": self.goal,
                "model": self.model,
                "adapter": self.adapter,
                "source": self.source,
                "started_at": self.started_at,
            }
            | ({"provenance": self.provenance} if self.provenance is not None else {})
            | ({"game": self.game} if self.game is not None else {})
        )

    def outcome(self) -> dict[str, Any]:
        """The fields written when the episode ends."""
        return {
            "status": self.status,
            "success": self.success,
            "total_return": self.total_return,
            "subgoals": self.subgoals,
            "end_reason": self.end_reason,
            "ended_at": self.ended_at,
            "n_steps": len(self.steps),
        }

    def to_dict(self) -> dict[str, Any]:
        d = self.header() | self.outcome()
        d["steps"] = [s.to_dict() for s in self.steps]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Episode":
        known = cls.__dataclass_fields__
        ep = cls(**{k: v for k, v in d.items() if k in known and k != "steps"})
        ep.steps = [Step.from_dict(s) for s in d.get("steps", [])]
        return ep
