"""A tool: a name, a description, a JSON schema of its arguments, and a function to call.

    from crl.agent.tools import tool

    @tool
    def calculator(expression: str) -> str:
        '''Evaluate an arithmetic expression.

        Args:
            expression: the expression, e.g. "2 * (3 + 4)"
        '''
        ...

`@tool` (or `as_tool(fn)`) reads the schema from the type hints and the `Args:` section
(`agent.tools.schema`); the function may be sync or async. A parameter annotated with
`ToolContext` receives the running episode (its id, task, step) and is not shown to the model.
A tool from elsewhere (an MCP server) is a `Tool` with its own schema and an async `call`.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from crl.agent.tools.schema import function_schema

DEFAULT_TIMEOUT_S = 30.0


class ToolError(Exception):
    """A tool could not be defined, found or reached; the message says why and what to do."""


@dataclass
class ToolContext:
    """What a tool may know of the episode that calls it.

    Attributes:
        episode_id: the running episode.
        task: its task (family/variant).
        goal: its goal.
        step: the index of the step making the call.
        memory_ids: ids of memories the tool showed the agent; they are credited with the
            episode's outcome like the memories a prompt showed (`recall` appends here).
    """

    episode_id: str = ""
    task: str = ""
    goal: str = ""
    step: int = 0
    memory_ids: list[str] = field(default_factory=list)


@dataclass
class Tool:
    """A callable the agent may use.

    Attributes:
        name: what the model calls it by.
        description: what it does (the docstring's summary).
        parameters: the JSON schema of its arguments (an object schema).
        fn: the function, sync or async, called with the validated arguments as keywords.
        timeout_s: seconds one call may take before its result is an error.
        context_param: the parameter that receives the `ToolContext`, if the function has one.
        source: where it came from (a reference, an MCP server, "built-in").
    """

    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any] | Callable[..., Awaitable[Any]]
    timeout_s: float = DEFAULT_TIMEOUT_S
    context_param: str | None = None
    source: str = ""

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the function directly, as if it were not a tool."""
        return self.fn(*args, **kwargs)

    def schema(self) -> dict[str, Any]:
        """The OpenAI / TRL tool definition: `{"type": "function", "function": {...}}`."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def arguments_for(self, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        """The keyword arguments of the call: the model's, plus the context where the function takes it."""
        return arguments | {self.context_param: context} if self.context_param else dict(arguments)


def _is_context(hint: Any) -> bool:
    """Whether a parameter's hint is `ToolContext` (or `ToolContext | None`)."""
    from typing import get_args

    return hint is ToolContext or any(a is ToolContext for a in get_args(hint))


def as_tool(
    fn: Callable[..., Any] | Tool, name: str | None = None, timeout_s: float | None = None, source: str = ""
) -> Tool:
    """`fn` as a `Tool` (a `Tool` is returned as it is, renamed or re-timed if asked).

    Raises:
        SchemaError: the function's hints or docstring cannot describe its arguments.
    """
    if isinstance(fn, Tool):
        updates = {k: v for k, v in (("name", name), ("timeout_s", timeout_s)) if v is not None}
        return Tool(**{**fn.__dict__, **updates}) if updates else fn
    schema = function_schema(fn, skip=_is_context)["function"]
    hints = inspect.get_annotations(fn, eval_str=True)
    context = next((p for p, h in hints.items() if p != "return" and _is_context(h)), None)
    return Tool(
        name=name or schema["name"],
        description=schema["description"],
        parameters=schema["parameters"],
        fn=fn,
        timeout_s=DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s,
        context_param=context,
        source=source or f"{getattr(fn, '__module__', '')}:{getattr(fn, '__qualname__', schema['name'])}",
    )


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None, timeout_s: float | None = None):
    """Decorator: the function becomes a `Tool` (usable as `@tool` or `@tool(timeout_s=5)`).

    Example:
        >>> @tool
        ... def echo(text: str) -> str:
        ...     '''Repeat the text.
        ...
        ...     Args:
        ...         text: what to repeat
        ...     '''
        ...     return text
        >>> echo.schema()["function"]["parameters"]["required"]
        ['text']
    """
    if fn is None:
        return lambda f: as_tool(f, name=name, timeout_s=timeout_s)
    return as_tool(fn, name=name, timeout_s=timeout_s)
