"""Analogical action values from the whole family, for actions the nearest states say nothing of.

Episodic control reads values from the 20 stored steps nearest the current state. On a world
whose objects no stored world held (twc's dev and test folds), those steps rarely include a put of
an alike object to a place listed here, so the few analogical votes they hold (`ActionIndex` with
`ec_analogy`) are thin, and the untried prior decides. An action's analogues need not come from
alike states: "put lip gloss in dressing table" says where lipstick goes wherever it was taken.
With `ec_analogy` on, every stored step of the family (and task) whose action has an object and a
target votes for the admissible actions with the same verb, preposition and target, weighted by
the objects' similarity alone (`PhraseSimilarity.weight`), valued by what it did itself: +1 when
it reached a sub-goal (`StepRecord.subgoal_in` = 0: the put that scored), else what followed it
(`step_return`) capped at 0. An analogue from an unrelated state is credited with its own effect,
never with its episode's later win (a wrong put in a game won after the object was moved again
says nothing good about that place). These values stand in for an action's local value unless the
nearest states voted for the action itself (`episodic_control.merge_analogous`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from crl.memory.records import StepRecord
from crl.memory.retrieval.analogy import PhraseSimilarity, action_frame
from crl.memory.retrieval.config import RetrievalConfig
from crl.memory.retrieval.episodic_control import ActionValue, best_first, step_return

FrameTable = dict[tuple[str, str, str], list[tuple[str, StepRecord]]]
"""(verb, preposition, target) -> (object, stored step) for each stored step with that frame."""


class FrameSteps:
    """Every stored step of a family whose action has an object and a target, by (verb, preposition,
    target); read from the bank on first use and again whenever the family's step count changed."""

    def __init__(self, bank, trusted: Callable[[StepRecord], bool] = lambda step: True):
        self.bank = bank
        self.trusted = trusted
        self._tables: dict[str, tuple[int, FrameTable]] = {}

    def of(self, family: str) -> FrameTable:
        """(verb, preposition, target) -> (object, stored step) for the family's trusted steps."""
        count = self.bank.view.count("step", family)
        cached = self._tables.get(family)
        if cached is not None and cached[0] == count:
            return cached[1]
        table: FrameTable = {}
        for step in self.bank.ls("step", family=family):
            frame = action_frame(step.action) if step.tier != "quarantine" and self.trusted(step) else None
            if frame:
                table.setdefault(frame.key, []).append((frame.object, step))
        self._tables[family] = (count, table)
        return table


def analogue_return(step: StepRecord, config: RetrievalConfig) -> float | None:
    """+1 for a step that reached a sub-goal itself, else `step_return` capped at 0 (None: unfinished)."""
    r = step_return(step, config)
    if r is None:
        return None
    return 1.0 if step.subgoal_in == 0 and step.valid else min(r, 0.0)


def analogous_values(
    table: FrameTable,
    admissible: Sequence[str],
    config: RetrievalConfig,
    analogy: PhraseSimilarity,
    task: str | None = None,
    synthetic_weight: float = 1.0,
) -> dict[str, ActionValue]:
    """The value of each admissible "VERB OBJECT PREP TARGET" action from every stored step with the
    same verb, preposition and target (of `task` when given), weighted by the objects' similarity
    (and `synthetic_weight` for synthetic steps) and valued by `analogue_return`; best first as in
    `action_values`. `successes` counts the analogues that reached a sub-goal themselves. The table
    holds only the steps that may vote (`FrameSteps` with the retriever's `usable` test: with the
    verified-only defence on, no unverified success)."""
    out: dict[str, ActionValue] = {}
    for action in dict.fromkeys(admissible):
        frame = action_frame(action)
        stored = table.get(frame.key, []) if frame else []
        stored = [(obj, step) for obj, step in stored if task is None or step.task == task]
        if not stored:
            continue
        analogy.prepare([frame.object, *(obj for obj, _ in stored)])
        av = ActionValue(action, 0.0, 0.0, 0, 0, 0)
        for obj, step in stored:
            w = analogy.weight(frame.object, obj) * (synthetic_weight if step.source == "synthetic" else 1.0)
            r = analogue_return(step, config)
            if w > 0 and r is not None:
                av.add_vote(step, w, r, step.subgoal_in == 0, obj != frame.object)
        if av.support > 0:
            out[action] = av
    return best_first(out, config)
