"""Tool choice by scoring, arguments by generation: the text-mode tool path for local models.

A small model asked to write `Action: calculator {"expression": "61 * 66"}` from scratch mostly
writes something else (the 135M model answers `final_answer` with a guess, or copies the
schema's example into the expression). Where the backend can score (`score_actions`) and
continue a primed reply, each tool step instead

1. scores the tool names after `Action:`: pi_model(tool | state), one forward pass per prompt;
2. picks the tool: the model's argmax, or, under the posterior policy, the posterior that
   combines pi_model with memory's advantage of each tool in the nearest stored states (their
   stored calls read by tool name), the same `decide` that games use;
3. primes the reply with the tool's name and the opening of its first string argument
   (`Action: calculator {"expression": "`) and lets the model generate only the argument text.

The chosen tool's decision is logged as the step's `extra.policy` (decided by "llm" or
"memory", the posterior's numbers), so `crl explain` shows why a tool was called.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from crl.agent.llm.base import Completion, Message
from crl.memory.records import StepRecord
from crl.memory.trajectory import PolicyDecision


def tool_name_of(action: str) -> str:
    """The tool a logged call's text names (`calculator {"expression": "2+3"}` -> `calculator`)."""
    return action.strip().split("{", 1)[0].split(None, 1)[0] if action.strip() else ""


def call_opening(tool: str, parameters: Mapping[str, Any]) -> str:
    """What follows `Action:` before the model writes: the tool's name and, when its first
    required argument is a string, that argument opened (`' calculator {"expression": "'`)."""
    properties = parameters.get("properties") or {}
    required = [name for name in parameters.get("required") or [] if name in properties]
    first = required[0] if required else next(iter(properties), None)
    if first is None:
        return f" {tool} {{}}"
    if (properties[first] or {}).get("type") == "string":
        return f' {tool} {{{json.dumps(first)}: "'
    return f" {tool} {{{json.dumps(first)}: "


def by_tool_name(neighbours: Sequence[tuple[StepRecord, float]]) -> list[tuple[StepRecord, float]]:
    """The stored steps near this state with each call's text replaced by its tool's name, so
    that memory values tools (not one call's exact arguments)."""
    return [(step.model_copy(update={"action": tool_name_of(step.action)}), sim) for step, sim in neighbours]


@dataclass
class ToolPrime:
    """One step's chosen tool and the primed prompt that makes the model write its arguments."""

    tool: str
    opening: str
    messages: list[Message]
    decision: PolicyDecision

    def completed(self, completion: Completion) -> Completion:
        """The reply as if the model had written the opening itself."""
        return replace(completion, text=self.opening + completion.text)


def primed(messages: list[Message], opening: str) -> list[Message]:
    """`messages` with the trailing assistant prefix extended by `opening` (one added when absent)."""
    out = [dict(m) for m in messages]
    if out and out[-1]["role"] == "assistant":
        out[-1]["content"] = out[-1]["content"] + opening
    else:
        out.append({"role": "assistant", "content": "Action:" + opening})
    return out  # type: ignore[return-value]


def choose_tool(
    probs: Mapping[str, float],
    advantages: Mapping[str, Any],
    posterior: Any | None,
    rng: random.Random,
) -> PolicyDecision:
    """The tool to call: the model's argmax, or the posterior's choice when a posterior policy
    (`agent.posterior.PosteriorPolicy`) is given with memory's advantages over tool names."""
    if posterior is None:
        best = max(probs, key=lambda t: (probs[t], t))
        return PolicyDecision(
            decided_by="llm",
            reason=f"tool scored {probs[best]:.2f} of " + ", ".join(f"{t} {p:.2f}" for t, p in probs.items()),
            model_action=best,
        )
    from crl.agent.posterior import decide

    decision = decide(probs, advantages, posterior.config, rng)
    return PolicyDecision(
        decided_by=decision.decided_by,
        reason="tool " + decision.reason,
        model_action=decision.model_best,
        posterior=decision.to_dict(),
    )
