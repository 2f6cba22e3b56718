"""The prompt state: what a step's prompt shows besides memory (goal, observation, valid
actions, recent steps, the note about the last step), and how it advances from step to step.

`PromptHistory` is the one place that turns what happened at a step into what the next prompt
shows. The live episode loop (`agent.session`) advances it as steps happen; prompt replay
(`finetune.prompt_replay`) advances it from the logged steps; so both build the same prompts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from crl.prompts.feedback import repeat_note

NO_ACTION = "(no action)"


@dataclass(frozen=True)
class HistoryItem:
    """A past step as the prompt shows it: the action and the feedback it got.

    `call` is set on a native tool call (`{"id", "name", "arguments"}`, arguments as JSON text),
    which the prompt shows as an assistant turn with `tool_calls` and the feedback as the tool's turn.
    """

    action: str
    feedback: str
    call: dict[str, str] | None = None


@dataclass(frozen=True)
class PromptState:
    """Everything the step prompt shows except memory and the reply format.

    Attributes:
        goal: the episode's goal.
        observation: what the agent sees now (before any budget cut).
        admissible: the valid actions, when the task lists them.
        history: the recent steps shown, oldest first.
        feedback: the note about the last step (an unusable reply, a repeated action), or None.
    """

    goal: str
    observation: str
    admissible: Sequence[str] | None = None
    history: Sequence[HistoryItem] = ()
    feedback: str | None = None


@dataclass
class PromptHistory:
    """The steps taken so far and the note pending for the next prompt.

    Example:
        >>> h = PromptHistory(window=2)
        >>> h.acted("look", "A hall.", repeated=True)
        >>> h.state("Find the key.", "A hall.").feedback
        "You already did 'look' in this same situation; try something else."
    """

    window: int = 4
    items: list[HistoryItem] = field(default_factory=list)
    feedback: str | None = None

    def acted(
        self, action: str, next_observation: str, repeated: bool = False, call: dict[str, str] | None = None
    ) -> None:
        """`action` reached the environment (or a tool), which answered `next_observation`;
        `repeated` when it had been taken in this same situation before (the next prompt says
        so); `call` when it was a native tool call (see `HistoryItem`)."""
        self.feedback = repeat_note(action) if repeated else None
        self.items.append(HistoryItem(action, next_observation, call))

    def unusable(self, raw_action: str, error: str | None, call: dict[str, str] | None = None) -> None:
        """The reply gave no usable action (`raw_action` as written, possibly ""); `error`
        tells the model why, in the history and as the next prompt's note (for a native tool
        call, `call`, the error is the tool's answer instead)."""
        self.feedback = None if call else error
        self.items.append(HistoryItem(raw_action or NO_ACTION, error or "", call))

    def recent(self) -> list[HistoryItem]:
        """The steps the prompt shows: the last `window` (none when the window is 0)."""
        return self.items[-self.window :] if self.window else []

    def state(self, goal: str, observation: str, admissible: Sequence[str] | None = None) -> PromptState:
        """The prompt state for the next step, in situation `observation`."""
        return PromptState(goal, observation, admissible, tuple(self.recent()), self.feedback)
