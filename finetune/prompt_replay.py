"""Rebuild the exact chat prompt the agent saw at each step of a stored episode.

Training must see what inference sees. The prompt is not logged, but it is a deterministic
function of what is: the goal, the step's observation and admissible actions, the earlier
steps (history and feedback), and the prompt shape of the run (reply format, history window,
token budgets). This module advances the same prompt state as the agent
(`prompts.state.PromptHistory`) and builds the prompt with the same functions
(`prompts.agent_prompt`). A run records the hash of the templates it used: when the templates
changed since, the rebuilt prompt is marked not exact and a warning is logged.

Steps whose prompt held retrieved memories log the exact messages (`agent.log_prompts`), so
they are taken as logged ('keep'), or rebuilt without the memory section ('strip'), or left
out ('skip'); logs without the messages cannot restore the memory text and fall back to
'strip'. A prompt the budget shortened needs the run's token counter, so it is rebuilt only
with one, then checked against the logged report.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from crl.memory.trajectory import Step
from crl.prompts.agent_prompt import PromptBudget, PromptFormat, assemble_prompt, build_agent_messages
from crl.prompts.render import templates_hash
from crl.prompts.state import PromptHistory, PromptState

Message = dict[str, str]
log = logging.getLogger(__name__)


class PromptCounter(Protocol):
    """Token counting as the run's model did it (see `finetune.tokens.TokenizerCounter`)."""

    name: str

    def count_text(self, text: str) -> int: ...

    def count_messages(self, messages: list[Message]) -> int: ...


@dataclass(frozen=True)
class PromptShape:
    """How a run shaped its prompts (from its settings snapshot in run.json)."""

    react: bool = False
    history_window: int = 4
    max_prompt_tokens: int = 1024
    max_observation_tokens: int = 400
    templates: str | None = None
    tools: tuple[dict[str, Any], ...] | None = None

    @property
    def templates_changed(self) -> bool:
        """Whether the run used other prompt templates than this version's (False when unknown)."""
        return self.templates is not None and self.templates != templates_hash()

    @classmethod
    def from_run_settings(
        cls, settings: dict[str, Any], templates: str | None = None, tools: dict[str, Any] | None = None
    ) -> "PromptShape":
        """The shape recorded in a run's settings snapshot.

        `reply_format = auto` means react for every model but the embedded one, which is
        what an unset `llm.model` selects (see `agent.app.uses_react`). `templates` is the
        run's template hash (`RunInfo.prompt_templates`); `tools` what a tool-using run offered
        (`RunInfo.tools`: its definitions become the SFT rows' `tools` column).
        """
        agent = settings.get("agent", {}) or {}
        llm = settings.get("llm", {}) or {}
        fmt = agent.get("reply_format", "auto")
        react = fmt == "react" or (fmt == "auto" and bool(llm.get("model")))
        if agent.get("policy") == "posterior":
            react = False  # actions are scored right after the `Action:` priming (agent.app.uses_react)
        return cls(
            react=react,
            history_window=int(agent.get("history_window", 4)),
            max_prompt_tokens=int(agent.get("max_prompt_tokens", 1024)),
            max_observation_tokens=int(agent.get("max_observation_tokens", 400)),
            templates=templates,
            tools=tuple(tools.get("definitions") or ()) if tools else None,
        )


@lru_cache(maxsize=256)
def _run_settings(run_file: str) -> str:
    return Path(run_file).read_text()


def load_prompt_shape(runs_dir: str | Path | None, run_id: str, steps: Sequence[Step] = ()) -> PromptShape | None:
    """The prompt shape of run `run_id` from `<runs_dir>/<run_id>/run.json`.

    Without that file (an imported episode), the shape is guessed from the replies when
    they show the format ('Thought:' first means react) and None is returned otherwise.
    A run whose prompt templates differ from this version's is named in a warning (once).
    """
    if runs_dir is not None:
        run_file = Path(runs_dir) / run_id / "run.json"
        if run_file.is_file():
            info = json.loads(_run_settings(str(run_file)))
            shape = PromptShape.from_run_settings(
                info.get("settings", {}), info.get("prompt_templates"), info.get("tools")
            )
            if shape.templates_changed:
                _warn_templates_changed(run_id, shape.templates)
            return shape
    replies = [s.raw_output.lstrip() for s in steps if s.raw_output]
    if not replies:
        return None
    return PromptShape(react=replies[0].startswith("Thought:"))


@lru_cache(maxsize=256)
def _warn_templates_changed(run_id: str, templates: str) -> None:
    log.warning(
        "run %s used other prompt templates (hash %s, now %s): its rebuilt prompts are not exactly what "
        "the model saw; they are kept and marked not exact (rebuild the data from a new run to train on exact prompts)",
        run_id,
        templates,
        templates_hash(),
    )


@dataclass
class StepPrompt:
    """The prompt of one step, without the primed reply (that belongs to the completion).

    Attributes:
        messages: system and user messages as the agent sent them.
        exact: rebuilt exactly as seen (False when memory was stripped, the templates changed
            since the run, or nothing could check it).
        note: why it is not exact ("" when it is).
        templates_changed: rebuilt with other templates than the run used.
    """

    messages: list[Message]
    exact: bool = True
    note: str = ""
    templates_changed: bool = False


def prompt_states(goal: str, steps: Sequence[Step], history_window: int) -> list[PromptState]:
    """The prompt state at each step, advanced from the logged steps as the live loop
    (`agent.session.EpisodeSession`) advances it while it plays.

    A step whose action reached the environment adds `(action, next observation)` to the
    history (a repeated one makes the next note say so); an unusable reply adds `(raw reply,
    error)` and the error becomes the next note. States stop at an environment crash.
    """
    history = PromptHistory(window=history_window)
    out: list[PromptState] = []
    for i, step in enumerate(steps):
        out.append(history.state(goal, step.observation, step.admissible_actions))
        if not step.action:
            history.unusable(step.extra.raw_action or "", step.extra.feedback)
            continue
        if "error" in step.info:  # the environment crashed: the episode ended here
            break
        next_obs = steps[i + 1].observation if i + 1 < len(steps) else ""
        history.acted(step.action, next_obs, repeated=bool(step.extra.repeat))
    return out


def replay_prompts(
    goal: str,
    steps: Sequence[Step],
    shape: PromptShape,
    counter: PromptCounter | None = None,
    memory_prompts: str = "keep",
    verify_tokens: bool = False,
) -> list[StepPrompt | str]:
    """The prompt of every step of an episode, or for a step that cannot be rebuilt, why.

    Args:
        goal: the episode's goal.
        steps: its trajectory.
        shape: the run's prompt shape (`load_prompt_shape`).
        counter: the run's token counter; needed only where the budget shortened the prompt.
        memory_prompts: 'keep', 'strip' or 'skip' for steps whose prompt held memories.
        verify_tokens: compare the rebuilt prompt's token count with the logged one (only
            meaningful when `counter` counts as the run's model did).

    Returns:
        One entry per step: a `StepPrompt`, or a reason string such as 'prompt-has-memory'.

    Example:
        >>> from crl.memory.trajectory import Step
        >>> steps = [Step(0, "A hall.", "look", admissible_actions=["look"])]
        >>> replay_prompts("Find the key.", steps, PromptShape())[0].messages[1]["content"].splitlines()[0]
        'Goal: Find the key.'
    """
    out: list[StepPrompt | str] = []
    for step, state in zip(steps, prompt_states(goal, steps, shape.history_window)):
        out.append(_one(step, state, shape, counter, memory_prompts, verify_tokens))
    out.extend(["environment-error"] * (len(steps) - len(out)))
    return out


def _one(
    step: Step,
    state: PromptState,
    shape: PromptShape,
    counter: PromptCounter | None,
    memory_prompts: str,
    verify_tokens: bool,
) -> StepPrompt | str:
    report = step.extra.prompt
    has_memory = bool(report and report.memory_keys)
    if has_memory and memory_prompts == "skip":
        return "prompt-has-memory"
    if report is not None and report.messages is not None and (memory_prompts == "keep" or not has_memory):
        return StepPrompt(_without_primed_reply(report.messages))
    if step.extra.tool is not None:
        # A tool-using prompt lists the run's tools and is logged whole; it cannot be rebuilt.
        return "tool-prompt-has-memory" if has_memory else "tool-prompt-not-logged"
    fmt = PromptFormat(react=shape.react)
    shortened = bool(report and (report.history_dropped or report.observation_truncated))
    notes = ["memory section stripped"] if has_memory else []
    if not shortened:
        messages = build_agent_messages(state, fmt)
    else:
        if counter is None:
            return "needs-token-counter"
        budget = PromptBudget(
            shape.max_prompt_tokens, shape.max_observation_tokens, counter.count_text, counter.count_messages
        )
        messages, rebuilt = assemble_prompt(state, fmt, budget)
        if (rebuilt.history_dropped, rebuilt.observation_truncated) != (
            report.history_dropped,
            report.observation_truncated,
        ):
            return "prompt-mismatch"
    if shape.templates_changed:
        notes.append("prompt templates changed since the run")
    if report is None:
        if step.extra.policy is not None and not step.raw_output:
            # The memory policy acted without asking the model: this is the prompt it would have seen.
            notes.insert(0, f"model not asked (decided by {step.decided_by})")
        else:
            notes.insert(0, "no prompt report logged")
        return StepPrompt(messages, exact=False, note="; ".join(notes), templates_changed=shape.templates_changed)
    if verify_tokens and counter is not None and not has_memory and report.tokens:
        # The logged count includes the primed reply when the backend continued one.
        primed = messages + [{"role": "assistant", "content": _prefix(shape)}]
        if report.tokens not in (counter.count_messages(primed), counter.count_messages(messages)):
            return "prompt-mismatch"
    return StepPrompt(messages, exact=not notes, note="; ".join(notes), templates_changed=shape.templates_changed)


def _without_primed_reply(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The logged messages without the primed reply (a trailing assistant message); earlier
    assistant turns (native tool calls) stay."""
    out = [dict(m) for m in messages]
    if out and out[-1].get("role") == "assistant" and not out[-1].get("tool_calls"):
        out.pop()
    return out


def _prefix(shape: PromptShape) -> str:
    return "Thought:" if shape.react else "Action:"
