"""What tool call a model's reply makes: its native `tool_calls`, else the ReAct text."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from crl.agent.llm.base import Completion
from crl.agent.tools.react import canonical_call, loads_object, read_tool_call


@dataclass
class ToolReply:
    """One reply read as a tool call.

    Attributes:
        thought: the reasoning written before the call ("" when none).
        raw: the reply as logged (the text, or the native call as JSON).
        name: the tool called, or None when no call could be read.
        arguments: its arguments, or None when they could not be read.
        mode: "native" or "react".
        call_id: the native call's id (a ReAct call gets one from its step).
        error: why the reply cannot be used as written (None when it can).
        note: anything else the model should know (extra calls ignored).
    """

    thought: str
    raw: str
    name: str | None
    arguments: dict[str, Any] | None
    mode: str
    call_id: str
    error: str | None = None
    note: str | None = None

    @property
    def action(self) -> str:
        """The call's canonical text (the step's action), or "" when there is none."""
        if self.name is None or self.arguments is None:
            return ""
        return canonical_call(self.name, self.arguments)


def read_reply(completion: Completion, prefix: str, tools: dict[str, dict[str, Any]], step: int) -> ToolReply:
    """The tool call in `completion`: the first native call when there is one (the others are
    ignored and the model is told), else the call written in the text after `prefix`."""
    if completion.tool_calls:
        call = completion.tool_calls[0]
        raw = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
        note = None
        if len(completion.tool_calls) > 1:
            extra = ", ".join(c.name for c in completion.tool_calls[1:])
            note = f"only the first tool call of a turn runs; {extra} did not; call one tool per turn"
        error = None
        try:
            arguments = loads_object(call.arguments) if call.arguments.strip() else {}
        except ValueError:
            arguments, error = None, f"the arguments of {call.name} are not valid JSON: {call.arguments[:120]}"
        if error is None and not isinstance(arguments, dict):
            arguments, error = None, "arguments must be a JSON object"
        return ToolReply(
            completion.text.strip(),
            raw,
            call.name,
            arguments,
            "native",
            call.id,
            note=None if error else note,
            error=error,
        )
    text = prefix + completion.text
    parsed = read_tool_call(text, tools)
    return ToolReply(parsed.thought, text, parsed.name, parsed.arguments, "react", f"call_{step}", error=parsed.error)
