"""Run tool calls: arguments checked against the schema first, a deadline per tool, and at
most one execution per idempotency key.

A bad argument, an unknown tool, a timeout or an exception inside the tool is an outcome
(`ToolOutcome.status`), never an exception out of `ToolExecutor.call`: the agent shows it to
the model as the observation. The idempotency key names the episode, the step and the call
(`call_key`); an outcome is remembered under it, and with a journal file also across
processes, so a step that is played again (a retried model call, a resumed run) gets the first
outcome back instead of running the tool twice.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from crl.agent.tools.loop import LoopThread
from crl.agent.tools.tool import Tool, ToolContext
from crl.agent.tools.validate import argument_errors

MAX_RESULT_CHARS = 4000


@dataclass
class ToolOutcome:
    """What one call came to.

    Attributes:
        status: "ok", "error" (the tool raised), "timeout", "invalid" (arguments do not fit the
            schema) or "unknown" (no such tool).
        text: what the model is shown: the result, or the reason it failed and what to do.
        seconds: how long the call took.
        cached: True when the outcome was remembered under its key, not run again.
    """

    status: str
    text: str
    seconds: float = 0.0
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def call_key(episode_id: str, step: int, action: str) -> str:
    """The idempotency key of a call: episode, step index and the call's canonical text."""
    return f"{episode_id}#{step}#{action}"


def result_text(value: Any, limit: int = MAX_RESULT_CHARS) -> str:
    """A tool's return value as the text the model reads (JSON for structures), cut to `limit` characters.

    Example:
        >>> result_text({"sum": 5})
        '{"sum": 5}'
    """
    if value is None:
        text = "(no result)"
    elif isinstance(value, str):
        text = value
    elif isinstance(value, (dict, list, tuple, int, float, bool)):
        text = json.dumps(value, ensure_ascii=False, default=str)
    else:
        text = str(value)
    return text if len(text) <= limit else text[: limit - 20] + " ... (result cut)"


class ToolExecutor:
    """Calls the tools of one run.

    Args:
        tools: the tools by name.
        journal: a JSONL file of finished calls (key and outcome), appended before the step
            is logged; read back on start, so a resumed run never repeats a call.
        loop: the event loop for async tools (one is started when needed and not given).
    """

    def __init__(self, tools: Iterable[Tool], journal: str | Path | None = None, loop: LoopThread | None = None):
        self.tools = {t.name: t for t in tools}
        self.executions = 0
        self._journal = Path(journal) if journal else None
        self._done: dict[str, ToolOutcome] = {}
        self._lock = threading.Lock()
        self._loop = loop
        self._own_loop = False
        self._pool: ThreadPoolExecutor | None = None
        if self._journal is not None and self._journal.exists():
            for line in self._journal.read_text().splitlines():
                try:
                    entry = json.loads(line)
                    self._done[entry["key"]] = ToolOutcome(entry["status"], entry["text"], entry.get("seconds", 0.0))
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue  # a torn last line from a killed run

    def call(self, name: str, arguments: Any, key: str, context: ToolContext | None = None) -> ToolOutcome:
        """Run tool `name` once per `key` and return its outcome (see the module docstring)."""
        with self._lock:
            done = self._done.get(key)
        if done is not None:
            return ToolOutcome(done.status, done.text, done.seconds, cached=True)
        outcome = self._run(name, arguments, context or ToolContext())
        with self._lock:
            self._done[key] = outcome
            if self._journal is not None:
                self._journal.parent.mkdir(parents=True, exist_ok=True)
                with self._journal.open("a") as f:
                    f.write(json.dumps({"key": key} | asdict(outcome), ensure_ascii=False) + "\n")
        return outcome

    def _run(self, name: str, arguments: Any, context: ToolContext) -> ToolOutcome:
        tool = self.tools.get(name)
        if tool is None:
            return ToolOutcome("unknown", f"there is no tool {name!r}; the tools are: {', '.join(self.tools)}")
        errors = argument_errors(tool.parameters, arguments)
        if errors:
            return ToolOutcome("invalid", f"{name} was not called: " + "; ".join(errors))
        kwargs = tool.arguments_for(arguments, context)
        self.executions += 1
        started = time.monotonic()
        try:
            value = self._async(tool, kwargs) if tool.is_async else self._sync(tool, kwargs)
        except (TimeoutError, FutureTimeout):
            return ToolOutcome(
                "timeout",
                f"{name} did not answer within {tool.timeout_s:g} s; try simpler arguments or another tool",
                time.monotonic() - started,
            )
        except Exception as exc:
            return ToolOutcome("error", f"{name} failed: {type(exc).__name__}: {exc}", time.monotonic() - started)
        return ToolOutcome("ok", result_text(value), time.monotonic() - started)

    def _sync(self, tool: Tool, kwargs: dict[str, Any]) -> Any:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="crl-tool")
        # A sync tool past its deadline cannot be stopped; its thread is left to finish on its own.
        return self._pool.submit(tool.fn, **kwargs).result(timeout=tool.timeout_s or None)

    def _async(self, tool: Tool, kwargs: dict[str, Any]) -> Any:
        if self._loop is None:
            self._loop, self._own_loop = LoopThread(), True
        return self._loop.run(tool.fn(**kwargs), tool.timeout_s or None)

    def close(self) -> None:
        """Release the worker threads (and the event loop this executor started)."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
        if self._own_loop and self._loop is not None:
            self._loop.close()
