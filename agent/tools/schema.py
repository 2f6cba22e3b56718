"""JSON schemas of tools from typed Python functions with Google-style docstrings.

The schema is the one transformers' `get_json_schema` writes for the same function (the tests
hold the two side by side), so a chat template, an OpenAI-compatible server and TRL all read it:

    def calculator(expression: str, precision: int = 6) -> str:
        '''Evaluate an arithmetic expression.

        Args:
            expression: the expression, e.g. "2 * (3 + 4)"
            precision: digits after the decimal point
        '''

    function_schema(calculator)["function"]["parameters"] == {
        "type": "object",
        "properties": {
            "expression": {"type": "string", "description": 'the expression, e.g. "2 * (3 + 4)"'},
            "precision": {"type": "integer", "description": "digits after the decimal point"},
        },
        "required": ["expression"],
    }

Two differences, both deliberate: parameters annotated with `ToolContext` (what the agent loop
passes a tool about the running episode) are left out, since the model never writes them; and
the return value's schema is kept apart (`returns`) because OpenAI's API refuses unknown keys
in a function definition.
"""

from __future__ import annotations

import inspect
import json
import re
import types
from collections.abc import Callable
from enum import Enum
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

_DESCRIPTION = re.compile(r"^(.*?)[\n\s]*(Args:|Returns:|Raises:|\Z)", re.DOTALL)
_ARGS = re.compile(r"\n\s*Args:\n(.*?)[\n\s]*(Returns:|Raises:|\Z)", re.DOTALL)
_RETURNS = re.compile(r"\n\s*Returns:\n\s*(.*?)[\n\s]*(Raises:|\Z)", re.DOTALL)
_ARG_LINE = re.compile(r"^([ \t]*)(\w+)(?:[ \t]*\([^()\n]*\))?:[ \t]*(.*)$")
_CHOICES = re.compile(r"\(choices:\s*(.*?)\)\s*$", re.IGNORECASE)
_SCALARS = {int: "integer", float: "number", str: "string", bool: "boolean", type(None): "null"}
_BARE = {**{t: {"type": n} for t, n in _SCALARS.items()}, list: {"type": "array"}, tuple: {"type": "array"}}
_BARE[dict] = {"type": "object"}


class SchemaError(ValueError):
    """A function cannot be described as a tool; the message names the function and the fix."""


def parse_docstring(doc: str) -> tuple[str, dict[str, str], str | None]:
    """The summary, the `Args:` descriptions and the `Returns:` text of a Google-style docstring.

    Example:
        >>> parse_docstring("Add.\\n\\nArgs:\\n    a: first\\n        number\\n    b: second")
        ('Add.', {'a': 'first number', 'b': 'second'}, None)
    """
    doc = inspect.cleandoc(doc)
    summary = _DESCRIPTION.search(doc)
    args = _ARGS.search(doc)
    returns = _RETURNS.search(doc)
    described: dict[str, str] = {}
    if args:
        lines = [line for line in args.group(1).split("\n") if line.strip()]
        indent: int | None = None
        current: str | None = None
        for line in lines:
            match = _ARG_LINE.match(line)
            depth = len(line) - len(line.lstrip())
            if match and (indent is None or depth <= indent):
                indent = depth if indent is None else indent
                current = match.group(2)
                described[current] = match.group(3).strip()
            elif current is not None:
                described[current] = (described[current] + " " + line.strip()).strip()
    return (
        summary.group(1).strip() if summary else "",
        described,
        returns.group(1).strip() if returns else None,
    )


def type_schema(hint: Any, where: str = "") -> dict[str, Any]:
    """The JSON schema of one type hint (int, float, str, bool, None, Any, Enum, Literal,
    Optional / Union, list, tuple, dict).

    Example:
        >>> type_schema(list[int] | None)
        {'type': 'array', 'items': {'type': 'integer'}, 'nullable': True}
    """
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return {}
    if origin is None and isinstance(hint, type) and issubclass(hint, Enum):
        return _enum([m.value for m in hint], where)
    if origin is None:
        if hint in _BARE:
            return dict(_BARE[hint])
        raise SchemaError(
            f"{where}: the type {hint!r} has no JSON schema; use int, float, str, bool, list, dict, "
            "Literal, an Enum or a Union of these (or register the tool with a hand-written schema)"
        )
    if origin is Union or origin is types.UnionType:
        subtypes = [type_schema(t, where) for t in args if t is not type(None)]
        if len(subtypes) == 1:
            out = subtypes[0]
        elif all(s.keys() == {"type"} and isinstance(s["type"], str) for s in subtypes):
            names = sorted({s["type"] for s in subtypes})
            out = {"type": names[0] if len(names) == 1 else names}
        else:
            out = {"anyOf": subtypes}
        if type(None) in args:
            out["nullable"] = True
        return out
    if origin is Literal:
        return _enum(list(args), where)
    if origin is list:
        return {"type": "array", "items": type_schema(args[0], where)} if args else {"type": "array"}
    if origin is tuple:
        if not args:
            return {"type": "array"}
        if len(args) == 1 or ... in args:
            raise SchemaError(f"{where}: write a variable-length tuple as list[...] and a single item without tuple")
        return {"type": "array", "prefixItems": [type_schema(t, where) for t in args]}
    if origin is dict:
        out = {"type": "object"}
        if len(args) == 2:
            out["additionalProperties"] = type_schema(args[1], where)
        return out
    raise SchemaError(f"{where}: cannot describe the type {hint!r} as JSON; use a plain type or a Union of them")


def _enum(values: list, where: str) -> dict[str, Any]:
    if not values or any(type(v) not in _SCALARS for v in values):
        raise SchemaError(f"{where}: an Enum or Literal needs JSON scalar values (int, float, str, bool, None)")
    kinds = list(dict.fromkeys(_SCALARS[type(v)] for v in values))
    return {"type": kinds[0] if len(kinds) == 1 else kinds, "enum": values}


def function_schema(fn: Callable, skip: Callable[[Any], bool] = lambda hint: False) -> dict[str, Any]:
    """`{"type": "function", "function": {"name", "description", "parameters"}}` for `fn`, from
    its type hints and docstring (see the module docstring); `skip(hint)` leaves a parameter out.

    Raises:
        SchemaError: no docstring, a parameter without a type hint or without a description in
            `Args:`, or a type with no JSON schema.
    """
    name = getattr(fn, "__name__", "tool")
    doc = inspect.getdoc(fn)
    if not doc:
        raise SchemaError(f"tool {name}: it has no docstring; write one with a summary and an Args: section")
    summary, described, _ = parse_docstring(doc)
    hints = get_type_hints(fn)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if param.name not in hints:
            raise SchemaError(f"tool {name}: parameter {param.name!r} has no type hint; annotate it")
        if skip(hints[param.name]):
            continue
        schema = type_schema(hints[param.name], f"tool {name}, parameter {param.name!r}")
        if param.name not in described:
            raise SchemaError(
                f"tool {name}: parameter {param.name!r} is not described; add '{param.name}: ...' under Args:"
            )
        text = described[param.name]
        choices = _CHOICES.search(text)
        if choices:
            schema["enum"] = [c.strip() if isinstance(c, str) else c for c in json.loads(choices.group(1))]
            text = text[: choices.start()].strip()
        schema["description"] = text
        properties[param.name] = schema
        if param.default is param.empty:
            required.append(param.name)
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    return {"type": "function", "function": {"name": name, "description": summary, "parameters": parameters}}


def returns_text(fn: Callable) -> str | None:
    """The `Returns:` section of `fn`'s docstring, if any."""
    return parse_docstring(inspect.getdoc(fn) or "")[2]
