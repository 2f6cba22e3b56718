"""The items of a JSONL task: one JSON object a line, validated, each assigned to a fold.

A line holds `prompt` (what the agent is asked), `answer` (what the checker compares with: a
string, a number, or a list of acceptable ones), and optionally `context` (shown after the
prompt), `split` (`train`, `dev` or `test`), `id` (a stable name; it keeps the item in its fold
when the prompt is edited) and `meta` (anything a Python checker wants). Blank lines are skipped;
any other field is an error, so a misspelt `anwser` is caught rather than ignored.

Example:
    {"id": "q1", "prompt": "What is 6 times 7?", "answer": 42, "split": "dev"}
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crl.tasks.base import FOLDS, TaskError

Scalar = str | int | float

# Without a `split`, an item's fold comes from a hash of its id (or prompt): these shares.
HASH_SHARES = {"train": 0.7, "dev": 0.15, "test": 0.15}


class Item(BaseModel):
    """One question of a JSONL task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt: str = Field(min_length=1, description="What the agent is asked.")
    answer: Scalar | list[Scalar] = Field(description="The expected answer, or a list of acceptable ones.")
    context: str | None = Field(None, description="Material shown after the prompt.")
    split: Literal["train", "dev", "test"] | None = Field(None, description="The item's fold; unset: by hash.")
    id: str | None = Field(None, min_length=1, description="A stable name (keeps the fold when the prompt changes).")
    meta: dict[str, Any] | None = Field(None, description="Extra data for a Python checker.")

    @property
    def key(self) -> str:
        """What the fold hash and duplicate checks use: the id, else the prompt."""
        return self.id if self.id is not None else self.prompt

    @property
    def answers(self) -> list[Scalar]:
        """The acceptable answers as a list."""
        return list(self.answer) if isinstance(self.answer, list) else [self.answer]

    @property
    def fold(self) -> str:
        """`split` when given, else the fold a stable hash of `key` falls in (`HASH_SHARES`)."""
        return self.split or hashed_fold(self.key)

    def text(self) -> str:
        """What the agent reads: the prompt, then the context under a heading."""
        return self.prompt if self.context is None else f"{self.prompt}\n\nContext:\n{self.context}"


def hashed_fold(key: str) -> str:
    """The fold of an item without a `split`: the first 8 bytes of sha256(key) as a share in [0, 1).

    The same key lands in the same fold on every machine and Python version (no `hash()` salt).
    """
    share = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
    bound = 0.0
    for fold in FOLDS:
        bound += HASH_SHARES[fold]
        if share < bound:
            return fold
    return FOLDS[-1]


@dataclass(frozen=True)
class ItemSet:
    """A file's items grouped by fold, each fold in file order."""

    path: Path
    folds: dict[str, tuple[Item, ...]]

    def __len__(self) -> int:
        return sum(len(v) for v in self.folds.values())

    def sizes(self) -> str:
        """`train/dev/test` counts, e.g. `168/36/36`."""
        return "/".join(str(len(self.folds[f])) for f in FOLDS)


def load_items(path: str | Path, validate=None) -> ItemSet:
    """Read and validate a JSONL file of items.

    Args:
        path: the file.
        validate: optional `validate(item)` that raises ValueError for an item its checker cannot
            use (a bad regex, an answer that is not a number); its message joins the line's error.

    Raises:
        TaskError: the file is missing or empty, or some lines are bad; the message lists each bad
            line by number (up to 20) with what is wrong.
    """
    path = Path(path).expanduser()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise TaskError(f"no items file {path}; give the path of a JSONL file of items") from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise TaskError(f"{path} is not a UTF-8 JSONL file ({exc})") from None
    items: list[Item] = []
    errors: list[str] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = _parse_line(line, validate)
        except ValueError as exc:
            errors.append(f"  line {number}: {exc}")
            continue
        if item.key in seen:
            what = "id" if item.id is not None else "prompt (give the items distinct `id`s)"
            errors.append(f"  line {number}: same {what} as line {seen[item.key]}")
            continue
        seen[item.key] = number
        items.append(item)
    if errors:
        shown = errors[:20] + ([f"  ... and {len(errors) - 20} more"] if len(errors) > 20 else [])
        raise TaskError(f"{path}: {len(errors)} bad line(s); fix them and retry\n" + "\n".join(shown))
    if not items:
        raise TaskError(f"{path} holds no items; write one JSON object a line with `prompt` and `answer`")
    folds = {f: tuple(i for i in items if i.fold == f) for f in FOLDS}
    return ItemSet(path=path.resolve(), folds=folds)


def _parse_line(line: str, validate) -> Item:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    try:
        item = Item.model_validate(data)
    except ValidationError as exc:
        raise ValueError(_describe(exc.errors())) from None
    if validate is not None:
        validate(item)
    return item


def _describe(errors: list[dict]) -> str:
    by_field: dict[str, list[dict]] = {}
    for error in errors:
        by_field.setdefault(str(error["loc"][0]) if error["loc"] else "", []).append(error)
    messages = []
    for field, group in by_field.items():
        first = group[0]
        if first["type"] == "extra_forbidden":
            messages.append(f"unknown field {field!r} (allowed: {', '.join(Item.model_fields)})")
        elif first["type"] == "missing":
            messages.append(f"missing field {field!r}")
        elif field == "answer":
            messages.append(f"answer must be a string, a number or a list of them, not {first['input']!r}")
        else:
            messages.append(f"{field}: {first['msg']}")
    return "; ".join(messages)
