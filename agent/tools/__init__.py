"""Tools for the agent: typed Python functions (`@tool`), MCP servers' tools, and the
built-ins `final_answer` and `recall`; see `agent.tool_turns` for how a step calls one."""

from crl.agent.tools.tool import Tool, ToolContext, ToolError, as_tool, tool

__all__ = ["Tool", "ToolContext", "ToolError", "as_tool", "tool"]
