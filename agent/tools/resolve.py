"""From references (`module:function`, `path/to/file.py:function`) and MCP server specs to tools."""

from __future__ import annotations

from collections.abc import Iterable

from crl.agent.tools.tool import Tool, ToolError, as_tool


def resolve_tool(ref: str, timeout_s: float | None = None) -> Tool:
    """The tool that `ref` names: a `Tool` (made with `@tool`) or a typed, documented function.

    Raises:
        ToolError: the reference cannot be imported, or the function cannot be described as a tool.
    """
    from crl.agent.tools.schema import SchemaError
    from crl.tasks.base import TaskError
    from crl.tasks.refs import resolve_ref

    try:
        target = resolve_ref(ref)
    except TaskError as exc:
        raise ToolError(f"tool {exc}") from None
    try:
        return as_tool(target, timeout_s=timeout_s, source=ref)
    except SchemaError as exc:
        raise ToolError(f"tool {ref!r}: {exc}") from None


def unique_tools(tools: Iterable[Tool]) -> list[Tool]:
    """`tools` in order, the same tool named twice kept once.

    Raises:
        ToolError: two different tools share a name (the model could not tell them apart).
    """
    by_name: dict[str, Tool] = {}
    for t in tools:
        seen = by_name.get(t.name)
        if seen is not None and seen.source != t.source:
            raise ToolError(
                f"two tools are named {t.name!r} ({seen.source} and {t.source}); drop one, or wrap one "
                "with @tool(name=...) under another name"
            )
        by_name.setdefault(t.name, t)
    return list(by_name.values())
