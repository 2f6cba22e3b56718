"""SFT rows of native tool calls, in TRL's tool-calling format.

A step that called a tool natively teaches the call as an assistant turn with `tool_calls`,
after the conversation the agent saw (earlier calls as assistant `tool_calls` turns, their
results as `tool` turns), with the run's tool definitions in the `tools` column, which TRL
passes to the chat template (`apply_chat_template(..., tools=...)`):

    {"prompt": [{"role": "system", ...}, {"role": "user", ...},
                {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
                    "function": {"name": "calculator", "arguments": {"expression": "2+3"}}}]},
                {"role": "tool", "name": "calculator", "content": "5"}],
     "completion": [{"role": "assistant", "content": "", "tool_calls": [{"type": "function",
                    "function": {"name": "final_answer", "arguments": {"answer": "5"}}}]}],
     "tools": "[{\\"type\\": \\"function\\", \\"function\\": {...}}, ...]"}

Arguments are objects, as TRL's documentation writes them (chat templates render them with
`tojson`); `tools` is a JSON string, which TRL decodes, so that rows of tasks with different
tools fit one Arrow column. Steps whose prompt held the tools as text (ReAct) are ordinary rows:
their reply is `Action: <tool> {json}`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from crl.memory.trajectory import Step

FAILED = ("error", "timeout")


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


def trl_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Logged prompt messages with every tool call's arguments as an object (TRL's form)."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {
                    "type": "function",
                    "function": {"name": c["function"]["name"], "arguments": _arguments(c["function"]["arguments"])},
                }
                for c in m["tool_calls"]
            ]
        out.append(m)
    return out


def is_native_call(step: Step) -> bool:
    """Whether the step is a native tool call (taught as `tool_calls`, not as text)."""
    return step.extra.tool is not None and step.extra.tool.mode == "native"


def tool_completion(step: Step) -> list[dict[str, Any]]:
    """The assistant turn that makes the step's native call.

    Example:
        >>> from crl.memory.trajectory import Step, ToolCallRecord
        >>> s = Step(0, "Q", 'calculator {"expression": "2+3"}',
        ...          extra={"tool": {"name": "calculator", "arguments": {"expression": "2+3"}, "mode": "native"}})
        >>> tool_completion(s)[0]["tool_calls"][0]["function"]
        {'name': 'calculator', 'arguments': {'expression': '2+3'}}
    """
    record = step.extra.tool
    function = {"name": record.name, "arguments": dict(record.arguments or {})}
    return [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": function}]}]


def tool_skip_reason(step: Step, tools: Sequence[dict[str, Any]] | None) -> str | None:
    """Why a tool step is no SFT example: the tool failed (an error is nothing to imitate), or a
    native call's tool definitions are unknown (no run.json to read them from)."""
    record = step.extra.tool
    if record is None:
        return None
    if record.status in FAILED:
        return "tool-failed"
    if record.mode == "native" and not tools:
        return "tools-unknown"
    return None


def tools_column(tools: Sequence[dict[str, Any]]) -> str:
    """The `tools` column: the run's tool definitions as a JSON string."""
    return json.dumps(list(tools), ensure_ascii=False)
