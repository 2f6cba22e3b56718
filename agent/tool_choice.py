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
from collections.abc import Collection, Mapping, Sequence
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
    only_argument: bool = False

    def completed(self, completion: Completion) -> Completion:
        """The reply as if the model had written the opening itself: its first line, with a
        string argument the model left open closed (`12 * 83}` -> `12 * 83"}`); when that is the
        tool's only argument, the call ends there (keys the model invents after it are cut)."""
        text = completion.text.split("\n", 1)[0]
        if self.opening.endswith('"'):
            text = close_string(text, self.only_argument)
        return replace(completion, text=self.opening + text)


def close_string(text: str, only: bool = False) -> str:
    """The rest of a call whose first string argument was opened for the model: closed before
    the final brace when the model left it open (a brace added when missing); with `only`, the
    call is closed right after the string."""
    escaped = False
    for i, ch in enumerate(text):
        if ch == '"' and not escaped:
            return text[: i + 1] + "}" if only else text
        escaped = ch == "\\" and not escaped
    body = text.rstrip()
    body = body[:-1].rstrip() if body.endswith("}") else body
    return body + '"}'


def primed(messages: list[Message], opening: str) -> list[Message]:
    """`messages` with the trailing assistant prefix extended by `opening` (one added when absent)."""
    out = [dict(m) for m in messages]
    if out and out[-1]["role"] == "assistant":
        out[-1]["content"] = out[-1]["content"] + opening
    else:
        out.append({"role": "assistant", "content": "Action:" + opening})
    return out  # type: ignore[return-value]


def tools_tried_here(steps: Sequence[Any], observation: str) -> set[str]:
    """The tools this episode already called in the situation it is in now (same observation):
    a deterministic tool called again there returns what it returned before."""
    return {s.extra.tool.name for s in steps if s.extra.tool is not None and s.observation == observation}


def choose_tool(
    probs: Mapping[str, float],
    advantages: Mapping[str, Any],
    posterior: Any | None,
    rng: random.Random,
    avoid: Collection[str] = (),
) -> tuple[str, PolicyDecision]:
    """The tool to call and why: the model's argmax, or the posterior's choice when a posterior policy
    (`agent.posterior.PosteriorPolicy`) is given with memory's advantages over tool names. Tools
    in `avoid` (already called in this situation) are passed over while another is left."""
    if posterior is None:
        model_best = max(probs, key=lambda t: (probs[t], t))
        left = [t for t in probs if t not in avoid] or list(probs)
        best = max(left, key=lambda t: (probs[t], t))
        reason = f"tool scored {probs[best]:.2f} of " + ", ".join(f"{t} {p:.2f}" for t, p in probs.items())
        if best != model_best:
            reason += f"; already called here: {', '.join(sorted(avoid))}"
        return best, PolicyDecision(
            decided_by="llm" if best == model_best else "repeat-avoidance", reason=reason, model_action=model_best
        )
    from crl.agent.posterior import decide

    decision = decide(probs, advantages, posterior.config, rng, avoid=avoid)
    return decision.chosen, PolicyDecision(
        decided_by=decision.decided_by,
        reason="tool " + decision.reason,
        model_action=decision.model_best,
        posterior=decision.to_dict(),
    )
