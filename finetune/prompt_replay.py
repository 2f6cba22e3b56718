"""Rebuild the exact chat prompt the agent saw at each step of a stored episode.

Training must see what inference sees. The prompt is not logged, but it is a deterministic
function of what is: the goal, the step's observation and admissible actions, the earlier
steps (history and feedback), and the prompt shape of the run (reply format, history window,
token budgets). This module calls the same builders as the agent (`prompts.agent_prompt`).

Steps whose prompt held retrieved memories log the exact messages (`agent.log_prompts`), so
they are taken as logged ('keep'), or rebuilt without the memory section ('strip'), or left
out ('skip'); logs without the messages cannot restore the memory text and fall back to
'strip'. A prompt the budget shortened needs the run's token counter, so it is rebuilt only
with one, then checked against the logged report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol, Sequence

from memory.trajectory import Step
from prompts.agent_prompt import HistoryItem, assemble_prompt, build_agent_messages

Message = dict[str, str]

# Mirrors agent/session.py (`EpisodeSession._advance`): the note shown after a repeated action.
# The oracle test in tests/test_finetune_data.py fails if the two drift apart.
REPEAT_NOTE = "You already did '{action}' in this same situation; try something else."


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

    @classmethod
    def from_run_settings(cls, settings: dict[str, Any]) -> "PromptShape":
        """The shape recorded in a run's settings snapshot.

        `reply_format = auto` means react for every model but the embedded one, which is
        what an unset `llm.model` selects (see `agent.app.uses_react`).
        """
        agent = settings.get("agent", {}) or {}
        llm = settings.get("llm", {}) or {}
        fmt = agent.get("reply_format", "auto")
        react = fmt == "react" or (fmt == "auto" and bool(llm.get("model")))
        return cls(
            react=react,
            history_window=int(agent.get("history_window", 4)),
            max_prompt_tokens=int(agent.get("max_prompt_tokens", 1024)),
            max_observation_tokens=int(agent.get("max_observation_tokens", 400)),
        )


@lru_cache(maxsize=256)
def _run_settings(run_file: str) -> str:
    return Path(run_file).read_text()


def load_prompt_shape(runs_dir: str | Path | None, run_id: str, steps: Sequence[Step] = ()) -> PromptShape | None:
    """The prompt shape of run `run_id` from `<runs_dir>/<run_id>/run.json`.

    Without that file (an imported episode), the shape is guessed from the replies when
    they show the format ('Thought:' first means react) and None is returned otherwise.
    """
    if runs_dir is not None:
        run_file = Path(runs_dir) / run_id / "run.json"
        if run_file.is_file():
            return PromptShape.from_run_settings(json.loads(_run_settings(str(run_file))).get("settings", {}))
    replies = [s.raw_output.lstrip() for s in steps if s.raw_output]
    if not replies:
        return None
    return PromptShape(react=replies[0].startswith("Thought:"))


@dataclass
class StepPrompt:
    """The prompt of one step, without the primed reply (that belongs to the completion).

    Attributes:
        messages: system and user messages as the agent sent them.
        exact: rebuilt exactly as seen (False when memory was stripped or nothing could check it).
        note: why it is not exact ("" when it is).
    """

    messages: list[Message]
    exact: bool = True
    note: str = ""


@dataclass
class StepInputs:
    """What the session held when it built the prompt of one step."""

    history: list[HistoryItem]
    feedback: str | None


def step_inputs(steps: Sequence[Step]) -> list[StepInputs]:
    """History and feedback at each step, replayed as `agent.session.EpisodeSession.apply` builds them.

    A parsed action that reached the environment adds `(action, next observation)` to the
    history; an unparseable reply adds `(raw reply, error)` and the error becomes the next
    step's note; repeating an action in the same situation makes the next note a warning.
    """
    history: list[HistoryItem] = []
    feedback: str | None = None
    out: list[StepInputs] = []
    for i, step in enumerate(steps):
        out.append(StepInputs(list(history), feedback))
        if not step.action:
            error = step.extra.get("feedback")
            history.append(HistoryItem(step.extra.get("raw_action") or "(no action)", error or ""))
            feedback = error
            continue
        if "error" in step.info:  # the environment crashed: the episode ended here
            break
        next_obs = steps[i + 1].observation if i + 1 < len(steps) else ""
        history.append(HistoryItem(step.action, next_obs))
        feedback = REPEAT_NOTE.format(action=step.action) if step.extra.get("repeat") else None
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
        >>> from memory.trajectory import Step
        >>> steps = [Step(0, "A hall.", "look", admissible_actions=["look"])]
        >>> replay_prompts("Find the key.", steps, PromptShape())[0].messages[1]["content"].splitlines()[0]
        'Goal: Find the key.'
    """
    out: list[StepPrompt | str] = []
    for step, inputs in zip(steps, step_inputs(steps)):
        out.append(_one(goal, step, inputs, shape, counter, memory_prompts, verify_tokens))
    out.extend(["environment-error"] * (len(steps) - len(out)))
    return out


def _one(
    goal: str,
    step: Step,
    inputs: StepInputs,
    shape: PromptShape,
    counter: PromptCounter | None,
    memory_prompts: str,
    verify_tokens: bool,
) -> StepPrompt | str:
    report = step.extra.get("prompt")
    has_memory = bool(report and report.get("memory_keys"))
    if has_memory and memory_prompts == "skip":
        return "prompt-has-memory"
    logged = isinstance(report, dict) and isinstance(report.get("messages"), list)
    if logged and (memory_prompts == "keep" or not has_memory):
        return StepPrompt([dict(m) for m in report["messages"] if m.get("role") != "assistant"])
    history = inputs.history[-shape.history_window :] if shape.history_window else []
    shortened = bool(report and (report.get("history_dropped") or report.get("observation_truncated")))
    note = "memory section stripped" if has_memory else ""
    if not shortened:
        messages = build_agent_messages(
            goal, step.observation, step.admissible_actions, history, inputs.feedback, shape.react
        )
    else:
        if counter is None:
            return "needs-token-counter"
        messages, rebuilt = assemble_prompt(
            goal=goal,
            observation=step.observation,
            admissible=step.admissible_actions,
            history=history,
            feedback=inputs.feedback,
            react=shape.react,
            reply_prefix="",
            memory_items=(),
            budget=shape.max_prompt_tokens,
            max_observation_tokens=shape.max_observation_tokens,
            count_text=counter.count_text,
            count_messages=counter.count_messages,
        )
        if (rebuilt.history_dropped, rebuilt.observation_truncated) != (
            report.get("history_dropped", 0),
            bool(report.get("observation_truncated")),
        ):
            return "prompt-mismatch"
    if report is None:
        if step.extra.get("policy") and not step.raw_output:
            # The memory policy acted without asking the model: this is the prompt it would have seen.
            return StepPrompt(messages, exact=False, note=f"model not asked (decided by {step.decided_by})")
        return StepPrompt(messages, exact=False, note="no prompt report logged")
    if verify_tokens and counter is not None and not has_memory and "tokens" in report:
        # The logged count includes the primed reply when the backend continued one.
        primed = messages + [{"role": "assistant", "content": _prefix(shape)}]
        if report["tokens"] not in (counter.count_messages(primed), counter.count_messages(messages)):
            return "prompt-mismatch"
    return StepPrompt(messages, exact=not has_memory, note=note)


def _prefix(shape: PromptShape) -> str:
    return "Thought:" if shape.react else "Action:"
