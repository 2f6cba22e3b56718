"""Experience replay for the DRRN: tokenized transitions, with an optional share for rewarded episodes.

Prioritized sampling in the style of Narasimhan et al. 2015 (LSTM-DQN): a fraction of every batch
comes from transitions of episodes that earned positive reward, so a rare early success is replayed
often enough to propagate its value back along the path that reached it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

Ids = tuple[int, ...]
State = tuple[Ids, ...]


@dataclass(frozen=True)
class Transition:
    """One step as token ids: the state (its segments), the chosen action, the reward, and what followed.

    `next_actions` are the admissible actions after the step (empty when `done`); `done` is True
    only when the game itself ended, never on the step limit, so a cut-off episode still bootstraps.
    """

    state: State
    action: Ids
    reward: float
    next_state: State
    next_actions: tuple[Ids, ...]
    done: bool

    def to_list(self) -> list:
        """A plain nested list (what a checkpoint stores)."""
        return [
            _lists(self.state),
            list(self.action),
            self.reward,
            _lists(self.next_state),
            _lists(self.next_actions),
            self.done,
        ]

    @classmethod
    def from_list(cls, row: list) -> "Transition":
        """The inverse of `to_list`."""
        state, action, reward, next_state, next_actions, done = row
        return cls(
            _tuples(state),
            tuple(action),
            float(reward),
            _tuples(next_state),
            _tuples(next_actions),
            bool(done),
        )


def _lists(rows: tuple[Ids, ...]) -> list[list[int]]:
    return [list(r) for r in rows]


def _tuples(rows: list[list[int]]) -> tuple[Ids, ...]:
    return tuple(tuple(r) for r in rows)


class _Ring:
    """A fixed-capacity list that overwrites its oldest entry when full."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.items: list[Transition] = []
        self.next = 0

    def push(self, item: Transition) -> None:
        if self.capacity <= 0:
            return
        if len(self.items) < self.capacity:
            self.items.append(item)
        else:
            self.items[self.next] = item
        self.next = (self.next + 1) % self.capacity


class ReplayBuffer:
    """Uniform replay over all transitions, plus `priority_fraction` of each batch from rewarded episodes.

    Args:
        capacity: transitions kept in all (the oldest are overwritten first).
        priority_fraction: share of each batch drawn from episodes with positive return, 0 to 1;
            0 is plain uniform replay. That share of `capacity` is reserved for them.
    """

    def __init__(self, capacity: int, priority_fraction: float = 0.0):
        if capacity < 1:
            raise ValueError(f"replay capacity must be at least 1, got {capacity}")
        if not 0.0 <= priority_fraction <= 1.0:
            raise ValueError(f"priority_fraction must lie in [0, 1], got {priority_fraction}")
        self.priority_fraction = priority_fraction
        reserved = int(capacity * priority_fraction)
        self.priority = _Ring(reserved)
        self.ordinary = _Ring(capacity - reserved)

    def push_episode(self, transitions: list[Transition]) -> None:
        """Store a finished (or cut-off) episode's transitions; rewarded episodes go to the priority share."""
        rewarded = self.priority.capacity > 0 and sum(t.reward for t in transitions) > 0
        ring = self.priority if rewarded else self.ordinary
        for t in transitions:
            ring.push(t)

    def sample(self, batch_size: int, rng: random.Random) -> list[Transition]:
        """`batch_size` transitions drawn with replacement (fewer only when the buffer is empty)."""
        pri, ordi = self.priority.items, self.ordinary.items
        if not pri and not ordi:
            return []
        n_pri = round(batch_size * self.priority_fraction) if pri else 0
        if not ordi:
            n_pri = batch_size
        return [rng.choice(pri) for _ in range(n_pri)] + [rng.choice(ordi) for _ in range(batch_size - n_pri)]

    def __len__(self) -> int:
        return len(self.priority.items) + len(self.ordinary.items)

    def state_dict(self) -> dict:
        """Plain lists and ints (safe for `torch.load(weights_only=True)`)."""
        return {
            "priority": [t.to_list() for t in self.priority.items],
            "priority_next": self.priority.next,
            "ordinary": [t.to_list() for t in self.ordinary.items],
            "ordinary_next": self.ordinary.next,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore what `state_dict` returned (into a buffer built with the same capacity)."""
        for name in ("priority", "ordinary"):
            ring: _Ring = getattr(self, name)
            ring.items = [Transition.from_list(r) for r in state[name]][: ring.capacity]
            ring.next = int(state[f"{name}_next"])


__all__ = ["ReplayBuffer", "Transition"]
