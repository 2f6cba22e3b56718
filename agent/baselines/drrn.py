"""The DRRN agent (He et al. 2016): Q(s, a) over admissible actions, trained by double-Q TD learning.

The state is the goal and the observation text; each admissible action is encoded on its own, so
the action set may change from step to step. Exploration is epsilon-greedy or a softmax over Q.
No pretrained model: words get ids from a vocabulary grown while playing.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields

import torch
import torch.nn.functional as F

from crl.agent.baselines.network import DRRNetwork
from crl.agent.baselines.replay import Ids, State, Transition
from crl.agent.baselines.vocab import Vocab, segments
from crl.tasks.base import Observation

EXPLORATIONS = ("epsilon", "softmax")


@dataclass
class DRRNConfig:
    """Hyper-parameters of the DRRN and its learner (defaults suit keyroom-sized games on one CPU thread)."""

    embed_dim: int = field(default=64, metadata={"help": "word embedding size"})
    hidden_dim: int = field(default=128, metadata={"help": "size of the state and action codes"})
    encoder: str = field(default="gru", metadata={"help": "text encoder: gru or bag (mean of embeddings)"})
    interaction: str = field(default="mlp", metadata={"help": "how codes combine into Q: mlp or dot"})
    vocab_capacity: int = field(default=2000, metadata={"help": "most distinct words; later ones map to <unk>"})
    gamma: float = field(default=0.9, metadata={"help": "discount of future reward"})
    lr: float = field(default=1e-3, metadata={"help": "Adam learning rate"})
    batch_size: int = field(default=64, metadata={"help": "transitions per update"})
    replay_capacity: int = field(default=100_000, metadata={"help": "transitions kept for replay"})
    priority_fraction: float = field(
        default=0.25, metadata={"help": "share of each batch from episodes with positive return (0: uniform)"}
    )
    learning_starts: int = field(default=200, metadata={"help": "env steps played before the first update"})
    update_every: int = field(
        default=4, metadata={"help": "env steps between updates (Jericho's DRRN: one per 8 parallel env steps)"}
    )
    target_update: int = field(default=500, metadata={"help": "env steps between copies to the target network"})
    double_q: bool = field(default=True, metadata={"help": "pick the next action online, value it with the target"})
    grad_clip: float = field(default=5.0, metadata={"help": "max gradient norm"})
    exploration: str = field(default="epsilon", metadata={"help": "epsilon (greedy) or softmax over Q"})
    epsilon_start: float = field(default=1.0, metadata={"help": "exploration rate at step 0"})
    epsilon_end: float = field(default=0.05, metadata={"help": "exploration rate after the decay"})
    epsilon_decay_fraction: float = field(
        default=0.5, metadata={"help": "share of the step budget over which epsilon falls linearly"}
    )
    temperature: float = field(default=1.0, metadata={"help": "softmax temperature (exploration=softmax)"})

    def __post_init__(self):
        if self.exploration not in EXPLORATIONS:
            raise ValueError(f"unknown exploration {self.exploration!r}; choose one of {', '.join(EXPLORATIONS)}")
        if self.update_every < 1 or self.batch_size < 1 or self.target_update < 1:
            raise ValueError("update_every, batch_size and target_update must be at least 1")

    @classmethod
    def from_dict(cls, values: dict) -> "DRRNConfig":
        """A config from `asdict` output; unknown keys are an error that names them."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown DRRN settings {unknown}; known: {', '.join(sorted(known))}")
        return cls(**values)

    def epsilon(self, step: int, budget: int) -> float:
        """The epsilon-greedy rate after `step` of `budget` env steps."""
        horizon = max(1, int(budget * self.epsilon_decay_fraction))
        frac = min(1.0, step / horizon)
        return self.epsilon_start + frac * (self.epsilon_end - self.epsilon_start)


def state_segments(obs: Observation) -> list[str]:
    """What the state encoder reads: the goal, then each line or sentence of the observation."""
    return [obs.goal, *segments(obs.text)]


class DRRNAgent:
    """The online and target networks, their optimizer and the vocabulary.

    Args:
        config: hyper-parameters.
        rng: the generator for exploration draws (the learner seeds it).
    """

    def __init__(self, config: DRRNConfig, rng: random.Random | None = None):
        self.config = config
        self.rng = rng or random.Random(0)
        self.vocab = Vocab(config.vocab_capacity)
        self.net = DRRNetwork(
            config.vocab_capacity, config.embed_dim, config.hidden_dim, config.encoder, config.interaction
        )
        self.target = copy.deepcopy(self.net)
        self.target.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=config.lr)
        self.updates = 0

    def encode_state(self, obs: Observation, grow: bool = True) -> State:
        """Token ids of each segment of the state."""
        return tuple(self.vocab.encode(text, grow) for text in state_segments(obs))

    def encode(self, obs: Observation, grow: bool = True) -> tuple[State, tuple[Ids, ...]]:
        """Token ids of the state and of each admissible action (`grow=False` adds no words: evaluation)."""
        if not obs.admissible_actions:
            raise ValueError(
                "the DRRN chooses among admissible actions, but this observation lists none; "
                "use a task whose observations carry `admissible_actions`"
            )
        return self.encode_state(obs, grow), tuple(self.vocab.encode(a, grow) for a in obs.admissible_actions)

    def q_values(self, state: State, actions: Sequence[Ids]) -> torch.Tensor:
        """Online Q-values of `actions` in `state` (no gradients)."""
        return self.net.score(state, actions)

    def act(self, state: State, actions: Sequence[Ids], epsilon: float = 0.0, explore: bool = True) -> int:
        """The index of the action to play: exploring as configured, or greedy (first best) when `explore` is off."""
        if explore and self.config.exploration == "epsilon" and self.rng.random() < epsilon:
            return self.rng.randrange(len(actions))
        q = self.q_values(state, actions)
        if explore and self.config.exploration == "softmax":
            probs = torch.softmax(q / self.config.temperature, dim=0).tolist()
            return self.rng.choices(range(len(actions)), weights=probs)[0]
        return int(torch.argmax(q))

    def update(self, batch: Sequence[Transition]) -> float:
        """One gradient step on the Huber TD error of `batch`; returns the loss."""
        cfg = self.config
        q = self.net([t.state for t in batch], [[t.action] for t in batch])
        predicted = torch.stack([v[0] for v in q])
        with torch.no_grad():
            next_actions = [() if t.done else t.next_actions for t in batch]
            next_states = [t.next_state for t in batch]
            target_q = self.target(next_states, next_actions)
            online_q = self.net(next_states, next_actions) if cfg.double_q else target_q
            next_value = torch.tensor(
                [float(tq[int(torch.argmax(oq))]) if len(oq) else 0.0 for oq, tq in zip(online_q, target_q)]
            )
            rewards = torch.tensor([t.reward for t in batch])
            target = rewards + cfg.gamma * next_value
        loss = F.smooth_l1_loss(predicted, target)
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.net.parameters(), cfg.grad_clip)
        self.optimizer.step()
        self.updates += 1
        return loss.item()

    def sync_target(self) -> None:
        """Copy the online weights into the target network."""
        self.target.load_state_dict(self.net.state_dict())

    def state_dict(self) -> dict:
        """Weights, optimizer, vocabulary and counters (plain types and tensors only)."""
        return {
            "config": asdict(self.config),
            "net": self.net.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "vocab": self.vocab.words(),
            "updates": self.updates,
            "rng": self.rng.getstate(),
        }

    @classmethod
    def from_state_dict(cls, state: dict) -> "DRRNAgent":
        """Rebuild an agent from `state_dict` output."""
        agent = cls(DRRNConfig.from_dict(state["config"]))
        agent.vocab = Vocab(agent.config.vocab_capacity, list(state["vocab"]))
        agent.net.load_state_dict(state["net"])
        agent.target.load_state_dict(state["target"])
        agent.optimizer.load_state_dict(state["optimizer"])
        agent.updates = int(state["updates"])
        agent.rng.setstate(as_random_state(state["rng"]))
        return agent


def as_random_state(state) -> tuple:
    """`random.setstate` wants tuples; a loaded checkpoint may hold lists."""
    version, internal, gauss = state
    return (version, tuple(internal), gauss)
