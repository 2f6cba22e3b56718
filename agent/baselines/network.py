"""The DRRN Q-network: one encoder for the state text, another for each action text, and their interaction.

Q(s, a) = f(enc_s(s), enc_a(a)) with f a dot product (He et al. 2016) or a small MLP over the
concatenated codes (as in Hausknecht et al. 2020's Jericho DRRN). States in one batch may offer
different numbers of actions: actions are flattened, scored, and split back per state.

A state is a list of segments (the goal, then each line or sentence of the observation), each
encoded on its own and averaged, as Jericho's DRRN encodes observation, look and inventory
apart: short sequences batch well on a CPU, and segments repeated across states are encoded once.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from crl.agent.baselines.vocab import PAD

ENCODERS = ("gru", "bag")
INTERACTIONS = ("mlp", "dot")

TokenIds = Sequence[int]
Segments = Sequence[TokenIds]


class TextEncoder(nn.Module):
    """Token ids to one vector: a GRU's last hidden state, or a projected mean of word embeddings ("bag").

    The embedding table is passed in, so the state and action encoders can share it.
    """

    def __init__(self, embedding: nn.Embedding, hidden_dim: int, kind: str = "gru"):
        super().__init__()
        if kind not in ENCODERS:
            raise ValueError(f"unknown encoder {kind!r}; choose one of {', '.join(ENCODERS)}")
        self.kind = kind
        self.embedding = embedding
        if kind == "gru":
            self.rnn = nn.GRU(embedding.embedding_dim, hidden_dim, batch_first=True)
        else:
            self.proj = nn.Linear(embedding.embedding_dim, hidden_dim)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Encode a padded `[n, max_len]` batch whose rows have `lengths` real tokens; returns `[n, hidden]`."""
        emb = self.embedding(ids)
        if self.kind == "gru":
            packed = pack_padded_sequence(emb, lengths, batch_first=True, enforce_sorted=False)
            _, hidden = self.rnn(packed)
            return hidden[-1]
        mean = emb.sum(dim=1) / lengths.unsqueeze(1).to(emb.dtype)
        return torch.relu(self.proj(mean))


class DRRNetwork(nn.Module):
    """Scores every admissible action of every state in a batch (one shared word embedding, two encoders).

    Args:
        vocab_size: rows of each embedding table.
        embed_dim: word embedding size.
        hidden_dim: size of the state and action codes.
        encoder: "gru" or "bag".
        interaction: "mlp" or "dot".
    """

    def __init__(
        self,
        vocab_size: int,
        embed_dim: int = 64,
        hidden_dim: int = 128,
        encoder: str = "gru",
        interaction: str = "mlp",
    ):
        super().__init__()
        if interaction not in INTERACTIONS:
            raise ValueError(f"unknown interaction {interaction!r}; choose one of {', '.join(INTERACTIONS)}")
        self.interaction = interaction
        self.embedding = nn.Embedding(vocab_size, embed_dim, padding_idx=PAD)
        self.state_encoder = TextEncoder(self.embedding, hidden_dim, encoder)
        self.action_encoder = TextEncoder(self.embedding, hidden_dim, encoder)
        if interaction == "mlp":
            self.head = nn.Sequential(nn.Linear(2 * hidden_dim, hidden_dim), nn.ReLU(), nn.Linear(hidden_dim, 1))

    def forward(self, states: Sequence[Segments], actions: Sequence[Sequence[TokenIds]]) -> list[torch.Tensor]:
        """Q-values: for state `i`, a `[len(actions[i])]` tensor over its actions (empty when it has none)."""
        if len(states) != len(actions):
            raise ValueError(f"{len(states)} states but {len(actions)} action lists; pass one list per state")
        counts = [len(acts) for acts in actions]
        flat = [a for acts in actions for a in acts]
        if not flat:
            return [torch.zeros(0) for _ in states]
        state_codes = self.encode_states(states)
        action_codes = _encode_unique(self.action_encoder, flat)
        paired = state_codes.repeat_interleave(torch.tensor(counts), dim=0)
        if self.interaction == "dot":
            q = (paired * action_codes).sum(dim=-1)
        else:
            q = self.head(torch.cat([paired, action_codes], dim=-1)).squeeze(-1)
        return list(torch.split(q, counts))

    def encode_states(self, states: Sequence[Segments]) -> torch.Tensor:
        """`[len(states), hidden]`: each state's mean segment code."""
        sizes = [len(segments) for segments in states]
        if min(sizes) < 1:
            raise ValueError("every state needs at least one segment")
        codes = _encode_unique(self.state_encoder, [seg for segments in states for seg in segments])
        owner = torch.arange(len(states)).repeat_interleave(torch.tensor(sizes))
        summed = torch.zeros(len(states), codes.shape[1]).index_add(0, owner, codes)
        return summed / torch.tensor(sizes, dtype=codes.dtype).unsqueeze(1)

    def score(self, state: Segments, actions: Sequence[TokenIds]) -> torch.Tensor:
        """Q-values of one state's `actions`, without gradients."""
        with torch.no_grad():
            return self.forward([state], [actions])[0]


def _encode_unique(encoder: TextEncoder, texts: Sequence[TokenIds]) -> torch.Tensor:
    """Encode each distinct token sequence once (replay batches repeat the same texts many times)."""
    index: dict[tuple[int, ...], int] = {}
    rows = [index.setdefault(tuple(t), len(index)) for t in texts]
    width = max(len(t) for t in index)
    ids = torch.tensor([t + (PAD,) * (width - len(t)) for t in index], dtype=torch.long)
    lengths = torch.tensor([len(t) for t in index])
    return encoder(ids, lengths)[torch.tensor(rows)]
