"""The random-admissible-action baseline: the bar an agent must beat to have learned anything."""

from __future__ import annotations

import random
from collections.abc import Sequence

from crl.memory.trajectory import Episode


class RandomActor:
    """Takes a uniformly random admissible action, never asking the model where the task lists
    its actions (it falls back to the model where it does not). Seeded: runs are reproducible.

    It has the runner's advisor interface; with a `bank`, finished episodes are stored like
    any other experience.
    """

    policy = "random"

    def __init__(self, bank=None, seed: int = 0):
        self.bank = bank
        self.rng = random.Random(seed)

    def packs(self, queries: Sequence) -> list[None]:
        return [None] * len(queries)

    def prompt_items(self, pack) -> list:
        return []

    def wants_model(self, admissible: Sequence[str] | None) -> bool:
        return not admissible

    def chooser(self, pack, admissible: Sequence[str] | None, tried: set[str]):
        if not admissible:
            return None
        options = list(admissible)
        return lambda _model_action: (self.rng.choice(options), "random", "uniform over the admissible actions")

    def episode_end(self, episode: Episode, used_ids: Sequence[str]) -> None:
        if self.bank is not None:
            self.bank.ingest_episode(episode)
