"""A word-level vocabulary built on the fly: text in, token ids out, no pretrained tokenizer."""

from __future__ import annotations

import re

PAD, UNK = 0, 1
_WORD = re.compile(r"[a-z0-9]+|[^\sa-z0-9]")
_SEGMENT = re.compile(r"\n+|(?<=[.!?])\s+")


def words(text: str) -> list[str]:
    """Lower-cased words and punctuation marks of `text`.

    Example:
        >>> words("Take the KEY, now.")
        ['take', 'the', 'key', ',', 'now', '.']
    """
    return _WORD.findall(text.lower())


def segments(text: str) -> list[str]:
    """The non-empty lines and sentences of `text`.

    Example:
        >>> segments("Done. Well.\\n\\nYou are in the hall.")
        ['Done.', 'Well.', 'You are in the hall.']
    """
    return [part.strip() for part in _SEGMENT.split(text) if part.strip()]


class Vocab:
    """Maps words to ids, adding each new word until `capacity` ids exist (later ones map to UNK).

    Ids 0 and 1 are padding and unknown; an empty text encodes as `[UNK]`, so every sequence has
    at least one token.
    """

    def __init__(self, capacity: int, known: list[str] | None = None):
        if capacity < 3:
            raise ValueError(f"a vocabulary needs capacity >= 3 (padding, unknown and one word), got {capacity}")
        self.capacity = capacity
        self.itos: list[str] = ["<pad>", "<unk>"]
        self.stoi: dict[str, int] = {}
        for word in known or []:
            self._add(word)

    def _add(self, word: str) -> int:
        if word in self.stoi:
            return self.stoi[word]
        if len(self.itos) >= self.capacity:
            return UNK
        self.stoi[word] = len(self.itos)
        self.itos.append(word)
        return self.stoi[word]

    def encode(self, text: str, grow: bool = True) -> tuple[int, ...]:
        """Token ids of `text`; with `grow=False` unseen words map to UNK instead of being added."""
        ids = tuple(self._add(w) if grow else self.stoi.get(w, UNK) for w in words(text))
        return ids or (UNK,)

    def words(self) -> list[str]:
        """The known words in id order (without padding and unknown): what a checkpoint stores."""
        return self.itos[2:]

    def __len__(self) -> int:
        return len(self.itos)
