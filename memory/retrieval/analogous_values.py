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
from dataclasses import dataclass

from crl.memory.records import StepRecord
from crl.memory.retrieval.analogy import PhraseSimilarity, action_frame
from crl.memory.retrieval.config import RetrievalConfig
from crl.memory.retrieval.episodic_control import ActionValue, best_first, step_return

FrameTable = dict[tuple[str, str, str], list[tuple[str, StepRecord]]]
"""(verb, preposition, target) -> (object, stored step) for each stored step with that frame."""


@dataclass
class _Frames:
    count: int
    newest: float
    ids: set[str]
    table: FrameTable


class FrameSteps:
    """Every stored step of a family whose action has an object and a target, by (verb, preposition,
    target); read from the bank on first use. When the family's step count has grown, only the
    steps stored since the newest one read are fetched (a Chroma `where` on `created_at`) and added;
    if those do not account for the whole change (steps deleted, or stored with an older time by
    another writer), or no step had been read yet, the family is read again in full. Records changed
    in place (a tier, a credit) are seen at the next full read."""

    def __init__(self, bank, trusted: Callable[[StepRecord], bool] = lambda step: True):
        self.bank = bank
        self.trusted = trusted
        self._frames: dict[str, _Frames] = {}

    def of(self, family: str) -> FrameTable:
        """(verb, preposition, target) -> (object, stored step) for the family's trusted steps."""
        count = self.bank.view.count("step", family)
        cached = self._frames.get(family)
        if cached is not None and cached.count == count:
            return cached.table
        if cached is not None and cached.ids and count > cached.count:
            since = {"created_at": {"$gte": cached.newest}}
            new = [s for s in self._steps(family, since) if s.id not in cached.ids]
            if cached.count + len(new) == count:
                self._add(cached, new)
                cached.count = count
                return cached.table
        frames = _Frames(count, float("-inf"), set(), {})
        self._add(frames, self._steps(family))
        self._frames[family] = frames
        return frames.table

    def _steps(self, family: str, where: dict | None = None) -> list[StepRecord]:
        return [record for record, _ in self.bank.view.scan("step", [family], where=where)]

    def _add(self, frames: _Frames, steps: list[StepRecord]) -> None:
        for step in steps:
            frames.ids.add(step.id)
            frames.newest = max(frames.newest, step.created_at)
            frame = action_frame(step.action) if step.tier != "quarantine" and self.trusted(step) else None
            if frame:
                frames.table.setdefault(frame.key, []).append((frame.object, step))


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
