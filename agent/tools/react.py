"""Tool calls written as text (the ReAct fallback for models without native tool calling):

    Thought: I need the sum first.
    Action: calculator {"expression": "2+3"}

Read tolerantly, because small models are messy: `name {json}`, `name: {json}`,
`name({json})`, `name(expression="2+3")`, a JSON object `{"name": ..., "arguments": {...}}`,
single quotes, code fences, and for a tool with one string parameter the bare text
(`Action: final_answer 5`). `read_tool_call` never raises: a reply it cannot read comes back
with `call=None` and the reason, which the agent shows the model.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_ACTION = re.compile(r"(?:^|[\s*_#>`\"'(\[])action\s*[*_]*\s*[:：=]\s*[*_]*", re.IGNORECASE)
_THOUGHT = re.compile(r"(?:^|[\s*_#>`\"'(\[])thought\s*[*_]*\s*[:：=]\s*", re.IGNORECASE)
_NAME = re.compile(r"^\s*[`'\"*]*([A-Za-z_][\w.\-]*)[`'\"*]*\s*[:=]?\s*")


@dataclass
class TextToolCall:
    """What was read from a reply: the thought, the call (or None) and why not."""

    thought: str
    raw: str
    name: str | None = None
    arguments: dict[str, Any] | None = None
    error: str | None = None


def canonical_call(name: str, arguments: Mapping[str, Any]) -> str:
    """A call as one line of text: the tool's name, then its arguments as JSON with sorted keys.
    It is the step's action, so memory matches calls by tool and argument values.

    Example:
        >>> canonical_call("calculator", {"expression": "2+3"})
        'calculator {"expression": "2+3"}'
    """
    return f"{name} {json.dumps(dict(arguments), ensure_ascii=False, sort_keys=True)}"


def _balanced(text: str, start: int, open_: str, close: str) -> int | None:
    """The index just past the bracket that closes the one at `start` (quotes respected)."""
    depth, quote, escaped = 0, None, False
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == open_:
            depth += 1
        elif ch == close:
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def loads_object(text: str) -> Any:
    """A JSON-ish object: JSON, or a Python literal (single quotes, True/None), trailing commas allowed.

    Example:
        >>> loads_object("{'a': 1, 'b': True,}")
        {'a': 1, 'b': True}
    """
    for candidate in (text, re.sub(r",\s*([}\]])", r"\1", text)):
        try:
            return json.loads(candidate)
        except json.JSONDecodeError:
            pass
        try:
            return ast.literal_eval(candidate)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
    raise ValueError(f"not a JSON object: {text[:80]}")


def _keyword_call(inner: str) -> dict[str, Any]:
    """`a=1, b="x"` as a dict (a Python-style call's keywords)."""
    tree = ast.parse(f"f({inner})", mode="eval")
    call = tree.body
    if not isinstance(call, ast.Call) or call.args or any(k.arg is None for k in call.keywords):
        raise ValueError("write the arguments as name=value pairs or a JSON object")
    return {k.arg: ast.literal_eval(k.value) for k in call.keywords}


def _strip_fences(text: str) -> str:
    return re.sub(r"```[a-zA-Z]*", "", text).strip()


def _match_name(name: str, tools: Mapping[str, Mapping[str, Any]]) -> str | None:
    if name in tools:
        return name
    folded = {t.lower().replace("-", "_"): t for t in tools}
    return folded.get(name.lower().replace("-", "_"))


def _single_string_param(parameters: Mapping[str, Any]) -> str | None:
    props = parameters.get("properties") or {}
    required = parameters.get("required") or list(props)
    if len(required) == 1 and (props.get(required[0]) or {}).get("type") == "string":
        return required[0]
    return None


def _split(text: str) -> tuple[str, str, bool]:
    """`(thought, action text, marked)`: the text after the last `Action:` marker, or the whole reply."""
    actions = list(_ACTION.finditer(text))
    thought_m = _THOUGHT.search(text)
    if not actions:
        return "", text.strip(), False
    last = actions[-1]
    thought = text[thought_m.end() : last.start()].strip() if thought_m and thought_m.end() <= last.start() else ""
    return thought, text[last.end() :].strip(), True


def read_tool_call(text: str, tools: Mapping[str, Mapping[str, Any]]) -> TextToolCall:
    """The tool call in a ReAct reply.

    Args:
        text: the reply (with its primed prefix, e.g. "Action:").
        tools: each tool's name -> its parameters' JSON schema (for names and bare-text arguments).

    Example:
        >>> read_tool_call('Action: calculator {"expression": "2+3"}', {"calculator": {}}).arguments
        {'expression': '2+3'}
    """
    try:
        thought, rest, marked = _split(text or "")
        rest = _strip_fences(rest)
        name = _NAME.match(rest)
        if not marked and not rest.startswith("{") and (name is None or _match_name(name.group(1), tools) is None):
            return TextToolCall(thought, rest, error=_no_call(tools))
        return _read(thought, rest, tools)
    except Exception as exc:  # a parser bug, or arguments beyond repair: costs a step, not the run
        return TextToolCall("", text or "", error=f"could not read the tool call ({exc})")


def _no_call(tools: Mapping[str, Mapping[str, Any]]) -> str:
    return f"no tool call found; write 'Action: <tool> {{json arguments}}' with one of: {', '.join(tools)}"


def _read(thought: str, rest: str, tools: Mapping[str, Mapping[str, Any]]) -> TextToolCall:
    names = ", ".join(tools)
    if not rest:
        return TextToolCall(thought, rest, error=_no_call(tools))
    if rest.startswith("{"):
        end = _balanced(rest, 0, "{", "}")
        obj = loads_object(rest[:end] if end else rest)
        if isinstance(obj, dict) and isinstance(obj.get("name") or obj.get("tool"), str):
            raw_name = obj.get("name") or obj.get("tool")
            args = obj.get("arguments", obj.get("parameters", obj.get("args", {})))
            if isinstance(args, str):
                args = loads_object(args)
            return _named(thought, rest, raw_name, args, tools)
        return TextToolCall(
            thought, rest, error=f"a tool call names its tool first: 'Action: <tool> {{...}}' with one of: {names}"
        )
    match = _NAME.match(rest)
    if not match:
        return TextToolCall(
            thought, rest, error=f"no tool name found; write 'Action: <tool> {{json arguments}}' with one of: {names}"
        )
    raw_name, after = match.group(1), rest[match.end() :]
    if _match_name(raw_name, tools) is None:
        return TextToolCall(
            thought, rest, name=raw_name, error=f"there is no tool {raw_name!r}; the tools are: {names}"
        )
    line = after.split("\n", 1)[0].strip()
    if after.startswith("(") or line.startswith("("):
        start = after.index("(")
        end = _balanced(after, start, "(", ")")
        inner = after[start + 1 : (end - 1) if end else len(after)].strip()
        if not inner:
            args: Any = {}
        elif inner.startswith("{"):
            args = loads_object(inner)
        else:
            try:
                args = _keyword_call(inner)
            except (ValueError, SyntaxError):
                args = _bare(raw_name, inner, tools)
        return _named(thought, rest, raw_name, args, tools)
    if after.lstrip().startswith("{"):
        body = after.lstrip()
        end = _balanced(body, 0, "{", "}")
        if end is None:
            return TextToolCall(thought, rest, name=raw_name, error="the JSON arguments are not closed with '}'")
        return _named(thought, rest, raw_name, loads_object(body[:end]), tools)
    if not line:
        return _named(thought, rest, raw_name, {}, tools)
    return _named(thought, rest, raw_name, _bare(raw_name, line, tools), tools)


def _bare(raw_name: str, text: str, tools: Mapping[str, Mapping[str, Any]]) -> Any:
    """Bare text as the one string argument of the tool, when it has exactly one."""
    name = _match_name(raw_name, tools)
    param = _single_string_param(tools.get(name) or {}) if name else None
    if param is None:
        raise ValueError(f"write the arguments of {raw_name} as a JSON object")
    return {param: text.strip().strip("\"'`").strip()}


def _named(thought: str, raw: str, raw_name: str, args: Any, tools: Mapping[str, Mapping[str, Any]]) -> TextToolCall:
    name = _match_name(raw_name, tools)
    if name is None:
        return TextToolCall(
            thought, raw, name=raw_name, error=f"there is no tool {raw_name!r}; the tools are: {', '.join(tools)}"
        )
    if not isinstance(args, dict):
        param = _single_string_param(tools[name])
        if param is None:
            return TextToolCall(thought, raw, name=name, error=f"the arguments of {name} must be a JSON object")
        args = {param: args if isinstance(args, str) else json.dumps(args)}
    return TextToolCall(thought, raw, name=name, arguments=args)
