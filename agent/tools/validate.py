"""Check a tool call's arguments against the tool's JSON schema before the call (jsonschema)."""

from __future__ import annotations

import copy
from functools import lru_cache
from typing import Any


def strict_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` as JSON Schema proper: transformers' `"nullable": true` (an OpenAPI keyword that
    jsonschema ignores) becomes `null` among the allowed types.

    Example:
        >>> strict_schema({"type": "integer", "nullable": True})
        {'type': ['integer', 'null']}
    """
    out = copy.deepcopy(schema)

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            if node.pop("nullable", False):
                kind = node.get("type")
                if isinstance(kind, str):
                    node["type"] = [kind, "null"]
                elif isinstance(kind, list) and "null" not in kind:
                    node["type"] = [*kind, "null"]
                elif "anyOf" in node:
                    node["anyOf"] = [*node["anyOf"], {"type": "null"}]
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(out)
    return out


@lru_cache(maxsize=256)
def _validator(schema_json: str):
    import json

    from jsonschema import Draft202012Validator

    return Draft202012Validator(strict_schema(json.loads(schema_json)))


def argument_errors(parameters: dict[str, Any], arguments: Any) -> list[str]:
    """Why `arguments` do not fit the object schema `parameters`, one line per problem ([] when they do).

    Example:
        >>> schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
        >>> argument_errors(schema, {"n": "five"})
        ["argument 'n': 'five' is not of type 'integer'"]
        >>> argument_errors(schema, {})
        ["'n' is a required property"]
    """
    import json

    if not isinstance(arguments, dict):
        return [f"the arguments must be a JSON object, not {type(arguments).__name__}"]
    known = parameters.get("properties")
    if isinstance(known, dict) and not parameters.get("additionalProperties"):
        unknown = [k for k in arguments if k not in known]
        if unknown:
            takes = ", ".join(known) or "no arguments"
            return [f"unknown argument {k!r}; this tool takes: {takes}" for k in unknown]
    validator = _validator(json.dumps(parameters, sort_keys=True))
    errors = sorted(validator.iter_errors(arguments), key=lambda e: (list(e.path), e.message))
    out = []
    for error in errors:
        where = ".".join(str(p) for p in error.path)
        out.append(f"argument {where!r}: {error.message}" if where else error.message)
    return out
