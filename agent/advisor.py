"""Memory in the agent loop: one batched retrieval per lock-step, the prompt's memory items,
the policy's choice of action, and credit when an episode ends."""

from __future__ import annotations

import random
from typing import Callable, Literal, Sequence

from memory.credit import credit_episode
from memory.episodic_control import choose_memory, choose_mixed
from memory.records import EpisodeRecord, StepRecord
from memory.rerank import ScoredMemory
from memory.retrieval import ContextPack, RetrievalQuery, Retriever
from memory.trajectory import Episode
from prompts.budget import BudgetItem

MemoryMode = Literal["off", "cases", "steps", "full"]
Policy = Literal["llm", "memory", "mixed"]
Chooser = Callable[[str | None], tuple[str | None, str, str]]

ACTION_VALUE_KEY = "av:"
MAX_CASE_ACTIONS = 8


def _short(text: str, limit: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def render_case(record: EpisodeRecord) -> str:
    """A compact case: the goal, the key actions taken, and how it ended.

    Example: "Goal: Find the brass key and take it. Did: go east > take brass key.
    Result: success in 2 steps."
    """
    actions: list[str] = []
    for step in record.trajectory:
        if step.valid and step.action and (not actions or actions[-1] != step.action):
            actions.append(step.action)
    if len(actions) > MAX_CASE_ACTIONS:
        actions = actions[: MAX_CASE_ACTIONS // 2] + ["..."] + actions[-MAX_CASE_ACTIONS // 2 :]
    if record.success:
        result = f"success in {record.length} steps"
    else:
        reached = ", ".join(record.skills) or "no sub-goal"
        result = f"failure after {record.length} steps ({record.end_reason or record.status}; reached: {reached})"
    return f"Goal: {_short(record.goal)} Did: {' > '.join(actions) or 'nothing valid'}. Result: {result}."


def render_hint(record: StepRecord) -> str:
    """What was done in a similar stored state and how that episode ended."""
    ended = "success" if record.episode_outcome == "success" else "failure"
    return f"In \"{_short(record.observation, 70)}\" you did '{record.action}'; that episode ended in {ended}."


class MemoryAdvisor:
    """Brings the experience bank into the loop for one task family.

    Args:
        bank: the open `ExperienceBank` (experience of finished episodes is ingested here
            at once, so episodes that start later can retrieve it).
        retriever: the `Retriever` over that bank.
        mode: which memories go into prompts: off, cases (episodes), steps (step hints and
            action values) or full (all of these, and rules).
        policy: llm (the model decides), memory (episodic control decides, no model call
            when the task lists its actions), mixed (the model decides unless memory holds a
            confident, clearly better value).
        seed: seeds the memory policy's tie-breaking.
        learn: store finished episodes and credit the memories they used (off for
            evaluations, which must not change memory).
    """

    def __init__(
        self,
        bank,
        retriever: Retriever,
        mode: MemoryMode = "full",
        policy: Policy = "llm",
        seed: int = 0,
        learn: bool = True,
    ):
        self.bank = bank
        self.retriever = retriever
        self.mode = mode
        self.policy = policy
        self.rng = random.Random(seed)
        self.learn = learn

    def packs(self, queries: Sequence[RetrievalQuery]) -> list[ContextPack]:
        """One retrieval for all running episodes."""
        return self.retriever.retrieve(list(queries))

    def prompt_items(self, pack: ContextPack) -> list[BudgetItem]:
        """The pack as ranked prompt items for the token budget (the mode decides which)."""
        if self.mode == "off":
            return []
        items: list[BudgetItem] = []
        if self.mode in ("cases", "full"):
            items += [self._case(m, "success", 3.0) for m in pack.successes]
            items += [self._case(m, "failure", 2.0) for m in pack.failures]
        if self.mode in ("steps", "full"):
            top = sorted(pack.action_values.values(), key=lambda v: -v.support)[:3]
            items += [BudgetItem(ACTION_VALUE_KEY + v.action, "hint", v.hint, 4.0 + v.support / 100) for v in top]
            items += [BudgetItem(m.id, "hint", render_hint(m.record), 1.0 + m.score) for m in pack.hints]
        if self.mode == "full":
            items += [BudgetItem(m.id, "rule", m.record.text, 0.5 + m.score) for m in pack.rules]
        return items

    @staticmethod
    def _case(m: ScoredMemory, outcome: str, base: float) -> BudgetItem:
        return BudgetItem(m.id, "case", render_case(m.record), base + m.score, outcome)

    def wants_model(self, admissible: Sequence[str] | None) -> bool:
        """Whether the model is asked at all (the memory policy acts alone where it can)."""
        return not (self.policy == "memory" and admissible)

    def chooser(self, pack: ContextPack, admissible: Sequence[str] | None, tried: set[str]) -> Chooser | None:
        """How the policy turns the model's action (or None) into the action taken."""
        if self.policy == "llm" or not admissible:
            return None

        def explore() -> tuple[str, str]:
            return choose_memory(pack.action_values, admissible, self.rng, self.retriever.config, tried)

        if self.policy == "mixed":
            return lambda model_action: choose_mixed(
                model_action, pack.action_values, self.retriever.config, explore, tried
            )

        def memory_choice(_model_action: str | None) -> tuple[str | None, str, str]:
            action, reason = explore()
            return action, "memory", reason

        return memory_choice

    def episode_end(self, episode: Episode, used_ids: Sequence[str]) -> None:
        """Store the finished episode now and credit the memories its prompts used."""
        if not self.learn:
            return
        self.bank.ingest_episode(episode)
        if episode.status == "error":
            return
        ids = [i for i in dict.fromkeys(used_ids) if not i.startswith(ACTION_VALUE_KEY)]
        if ids:
            credit_episode(self.bank, episode.success, episode.family, ids, actor=f"run:{episode.run_id}")
