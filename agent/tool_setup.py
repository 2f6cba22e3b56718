"""Which tools a run offers: the task's own (`TaskSpec.tools`), the settings' (`--tool`,
`--mcp`), and `recall` where memory is in the loop; and whether they are called natively."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from crl.tasks.registry import get_task

if TYPE_CHECKING:
    from crl.agent.advisor import MemoryAdvisor
    from crl.agent.config import Settings
    from crl.agent.llm.base import ChatModel
    from crl.agent.tools.toolbox import Toolbox

TOOL_JOURNAL = "tool_calls.jsonl"


def tool_refs(settings: Settings, task: str) -> list[str]:
    """The tool references of a run of `task`: the task's own, then the settings', each once."""
    return list(dict.fromkeys([*get_task(task).tools, *settings.agent.tools]))


def uses_tools(settings: Settings, task: str) -> bool:
    """Whether episodes of `task` are tool-using under `settings` (a tool reference or an MCP server)."""
    return bool(tool_refs(settings, task) or settings.agent.mcp)


def calls_natively(settings: Settings, model: ChatModel) -> bool:
    """Whether tools go through the backend's native tool calling (`agent.tool_calling`).

    Raises:
        ValueError: native calling was asked of a backend that has none.
    """
    mode = settings.agent.tool_calling
    supported = bool(getattr(model, "supports_tools", False))
    if mode == "native" and not supported:
        raise ValueError(
            f"agent.tool_calling = 'native' but the {type(model).__name__} backend has no native tool calls; "
            "use the openai backend (an OpenAI-compatible server) or set agent.tool_calling = 'react'"
        )
    return mode == "native" or (mode == "auto" and supported)


def toolbox_for(
    settings: Settings,
    task: str,
    model: ChatModel,
    run_dir: Path,
    advisor: MemoryAdvisor | None = None,
) -> Toolbox | None:
    """The run's open toolbox, or None when the run offers no tools (a game played as before).

    The tool journal (`<run_dir>/tool_calls.jsonl`) keeps every call's outcome, so a resumed run
    does not call a tool again for a step it already called it in.
    """
    if not uses_tools(settings, task):
        return None
    from crl.agent.tools.builtin import recall_tool
    from crl.agent.tools.toolbox import open_toolbox

    agent = settings.agent
    extra = []
    if agent.recall and advisor is not None:
        extra.append(recall_tool(advisor.retriever, get_task(task).family, agent.tool_timeout_s))
    return open_toolbox(
        tool_refs(settings, task),
        agent.mcp,
        native=calls_natively(settings, model),
        timeout_s=agent.tool_timeout_s,
        journal=run_dir / TOOL_JOURNAL,
        extra=extra,
    )
