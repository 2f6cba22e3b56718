"""`PromptReport`: how one step's prompt was fitted into its token budget, as logged with the step."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any


@dataclass
class PromptReport:
    """How a prompt was fitted: its size, and what was cut to make it fit.

    Attributes:
        tokens: the prompt's size in the model's tokens.
        budget: the most it was allowed (`agent.max_prompt_tokens`).
        memory_keys: ids of the memory items that reached the prompt.
        dropped / shortened: ids of memory items left out or cut to fit.
        observation_truncated: whether the observation was cut.
        history_dropped: how many of the oldest history steps were left out.
        messages: the exact messages, when the agent logged them (`agent.log_prompts`).
        unknown: keys of a logged report that this version does not know, kept as they were.
    """

    tokens: int
    budget: int
    memory_keys: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    shortened: list[str] = field(default_factory=list)
    observation_truncated: bool = False
    history_dropped: int = 0
    messages: list[dict[str, str]] | None = None
    unknown: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The report as logged with the step (`messages` only when the agent chose to log them)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "unknown"}
        if out["messages"] is None:
            del out["messages"]
        return out | self.unknown

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PromptReport":
        """A report from its logged form; keys this version does not know go to `unknown`.

        Example:
            >>> PromptReport.from_dict({"tokens": 90, "budget": 1024, "cache_hit": True}).unknown
            {'cache_hit': True}
        """
        names = {f.name for f in fields(cls)} - {"unknown"}
        known = {k: v for k, v in data.items() if k in names}
        known.setdefault("tokens", 0)
        known.setdefault("budget", 0)
        return cls(**known, unknown={k: v for k, v in data.items() if k not in names})
