"""Memory in the agent loop: one batched retrieval per lock-step, the prompt's memory items,
the policy's choice of action, and credit when an episode ends."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Literal

from crl.memory.actors import actor_key
from crl.memory.records import EpisodeRecord, StepRecord
from crl.memory.retrieval.analogy import PhraseSimilarity
from crl.memory.retrieval.credit import credit_episode
from crl.memory.retrieval.episodic_control import (
    ActionIndex,
    MemoryAdvantage,
    UntriedPrior,
    VoteWeights,
    choose_memory,
    choose_mixed,
    memory_advantages,
)
from crl.memory.retrieval.rerank import ScoredMemory
from crl.memory.retrieval.retriever import ContextPack, RetrievalQuery, Retriever
from crl.memory.storage.outage import ServerUnavailable
from crl.memory.trajectory import Episode
from crl.prompts.budget import BudgetItem
from crl.prompts.memory_text import CaseView, render_case, render_hint

MemoryMode = Literal["off", "cases", "steps", "full"]
Policy = Literal["llm", "memory", "mixed", "posterior"]
Chooser = Callable[[str | None], tuple[str | None, str, str]]

ACTION_VALUE_KEY = "av:"


def case_view(record: EpisodeRecord) -> CaseView:
    """What a stored episode shows as a case in the prompt (`prompts.memory_text.render_case`)."""
    return CaseView(
        goal=record.goal,
        actions=[s.action for s in record.trajectory if s.valid and s.action],
        success=record.success,
        steps=record.length,
        ended=record.end_reason or record.status,
        reached=record.skills,
    )


def step_hint(record: StepRecord) -> str:
    """What was done in a similar stored state and how that episode ended."""
    return render_hint(record.observation, record.action, record.episode_outcome == "success")


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
            confident, clearly better value), posterior (the runner scores the actions and
            combines the model's probabilities with `advantages`; see `agent.posterior`).
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
        """One retrieval for all running episodes (nothing, while the memory server is unreachable)."""
        available = getattr(self.bank, "available", None)
        if available is None or available():
            try:
                return self.retriever.retrieve(list(queries))
            except ServerUnavailable as e:
                self.bank.server_failed(e)
        return [ContextPack(self.retriever.query_text(q)) for q in queries]

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
            items += [BudgetItem(m.id, "hint", step_hint(m.record), 1.0 + m.score) for m in pack.hints]
        if self.mode == "full":
            items += [BudgetItem(m.id, "rule", m.record.text, 0.5 + m.score) for m in pack.rules]
        return items

    @staticmethod
    def _case(m: ScoredMemory, outcome: str, base: float) -> BudgetItem:
        return BudgetItem(m.id, "case", render_case(case_view(m.record)), base + m.score, outcome)

    def advantages(
        self,
        pack: ContextPack | None,
        admissible: Sequence[str],
        task: str,
        same_task: bool = True,
        untried: UntriedPrior | None = None,
        weights: VoteWeights = VoteWeights(),
    ) -> dict[str, MemoryAdvantage]:
        """Memory's advantage of each admissible action in this state (for the posterior policy):
        what followed it in the nearest stored states minus what followed any action there
        (`untried`: how to value actions none of them took, see `UntriedPrior`).
        With `same_task`, a pack retrieved for a purpose (`ContextPack.purpose_neighbours`) is
        valued by the steps that worked toward that sub-goal in any task of the family; otherwise
        by the steps of the same task. `weights` scale votes by actor and world (`VoteWeights`);
        the pack's drift weight replaces its synthetic factor."""
        purposeful = same_task and pack is not None and pack.purpose_neighbours is not None
        neighbours = (pack.purpose_neighbours if purposeful else pack.neighbours) if pack is not None else None
        if not neighbours:
            return {}
        return memory_advantages(
            neighbours,
            admissible,
            self.retriever.config,
            task=task if same_task and not purposeful else None,
            untried=untried,
            weights=replace(weights, synthetic=pack.synthetic_weight),
            purpose=pack.purpose if purposeful else None,
            roles=pack.roles,
            analogy=self.analogy,
            analogous=pack.analogous,
        )

    def evidence_ids(
        self, pack: ContextPack, action: str, task: str | None = None, weights: VoteWeights = VoteWeights()
    ) -> list[str]:
        """The stored steps whose votes make memory's advantage for `action` here (credited when
        the episode ends, like the memories a prompt used): of the pack's purpose when it has one
        and `task` is given (as `advantages` with `same_task`), else of `task` (None: any)."""
        if task is not None and pack.purpose_neighbours is not None:
            pool = list(pack.purpose_neighbours)  # fetched with the purpose filter
        else:
            pool = [(step, sim) for step, sim in pack.neighbours if task is None or step.task == task]
        config = self.retriever.config
        nearest = weights.nearest(pool, config.ec_neighbours)
        index = ActionIndex(
            [action],
            0.0,
            pack.roles if config.ec_action_roles else None,
            self.analogy if config.ec_analogy else None,
        )
        index.prepare(step for step, _ in nearest)
        return [step.id for step, _ in nearest if index.matches(step)]

    @property
    def analogy(self) -> PhraseSimilarity | None:
        """The retriever's object similarity for analogical values (None from a retriever without one)."""
        return getattr(self.retriever, "analogy", None)

    def wants_model(self, admissible: Sequence[str] | None) -> bool:
        """Whether the model is asked at all (the memory policy acts alone where it can)."""
        return not (self.policy == "memory" and admissible)

    def chooser(self, pack: ContextPack, admissible: Sequence[str] | None, tried: set[str]) -> Chooser | None:
        """How the policy turns the model's action (or None) into the action taken."""
        if self.policy in ("llm", "posterior") or not admissible:
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
            credit_episode(
                self.bank,
                episode.success,
                episode.family,
                ids,
                actor=f"run:{episode.run_id}",
                model_actor=actor_key(episode.model, episode.adapter),
            )
