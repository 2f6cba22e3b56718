"""The tools of one run, open for its whole length: function tools from references, MCP
servers' tools, the built-ins, and the executor that calls them."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crl.agent.tools.builtin import FINAL_ANSWER, final_answer_tool
from crl.agent.tools.executor import ToolExecutor
from crl.agent.tools.loop import LoopThread
from crl.agent.tools.mcp_tools import MCPServer
from crl.agent.tools.react import canonical_call
from crl.agent.tools.resolve import resolve_tool, unique_tools
from crl.agent.tools.tool import DEFAULT_TIMEOUT_S, Tool, ToolError


@dataclass
class Toolbox:
    """What a tool-using run can call.

    Attributes:
        tools: every tool, `final_answer` last.
        executor: runs the calls (schema check, deadline, idempotency).
        native: calls go through the backend's native tool calling (else ReAct text).
        servers: the MCP sessions to close at the end.
    """

    tools: list[Tool]
    executor: ToolExecutor
    native: bool = False
    servers: list[MCPServer] = field(default_factory=list)
    loop: LoopThread | None = None

    def definitions(self) -> tuple[dict[str, Any], ...]:
        """The tools' definitions as the prompt and the API show them."""
        return tuple(t.schema() for t in self.tools)

    def parameters(self) -> dict[str, dict[str, Any]]:
        """Each tool's name -> its parameters' schema (what the ReAct parser needs)."""
        return {t.name: t.parameters for t in self.tools}

    def names(self) -> list[str]:
        return [t.name for t in self.tools]

    def report(self) -> dict[str, Any]:
        """For run.json: the tools offered (definitions and sources) and the calling mode."""
        return {
            "mode": "native" if self.native else "react",
            "definitions": list(self.definitions()),
            "sources": {t.name: t.source for t in self.tools},
        }

    def close(self) -> None:
        """End the MCP sessions, the worker threads and the event loop."""
        for server in self.servers:
            server.close()
        self.executor.close()
        if self.loop is not None:
            self.loop.close()


def open_toolbox(
    refs: Sequence[str] = (),
    mcp: Sequence[str] = (),
    native: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    journal: str | Path | None = None,
    extra: Iterable[Tool] = (),
) -> Toolbox:
    """Resolve the tool references, connect to the MCP servers, add `extra` (e.g. `recall`)
    and the built-in `final_answer`.

    Raises:
        ToolError: a reference or a server fails (nothing is left running), or two tools share a name.
    """
    loop = LoopThread()
    servers: list[MCPServer] = []
    try:
        tools = [resolve_tool(ref, timeout_s) for ref in refs]
        for spec in mcp:
            server = MCPServer(spec, loop, timeout_s)
            tools.extend(server.connect())
            servers.append(server)
        tools.extend(extra)
        if any(t.name == FINAL_ANSWER for t in tools):
            raise ToolError(f"{FINAL_ANSWER!r} is built in (it ends the episode); rename your tool")
        tools = unique_tools([*tools, final_answer_tool()])
    except BaseException:
        for server in servers:
            server.close()
        loop.close()
        raise
    return Toolbox(tools, ToolExecutor(tools, journal, loop), native, servers, loop)


def native_call(name: str, arguments: dict[str, Any] | None, call_id: str) -> dict[str, str]:
    """A native call as the prompt history keeps it (`prompts.state.HistoryItem.call`)."""
    return {"id": call_id, "name": name, "arguments": json.dumps(arguments or {}, ensure_ascii=False)}


__all__ = ["Toolbox", "canonical_call", "native_call", "open_toolbox"]
