"""`jsonl/<name>` tasks: questions from a JSONL file, answered once, verified by a checker.

The agent reads the item's prompt (and context), may call the task's tools for a few steps,
and ends with its final answer: the agent loop passes only that answer to `step`, which runs
the checker and ends the episode with reward 1.0 (success) or 0.0.

Seeds map onto items by fold: train seeds 0-99,999 play the train items in file order and wrap
around (seed `n_train` is the second pass over them, so a long training run repeats items);
dev seeds start at 100,000 and test seeds at 200,000, one seed per item, so `crl eval` plays
each held-out item once.

Example:
    >>> spec = jsonl_spec("arithmetic", "examples/arithmetic/items.jsonl", CheckerSpec(kind="numeric"))
    >>> env = spec.factory()
    >>> obs = env.reset(spec.folds.dev[0])
    >>> env.step("42").info["verdict"]["checker"]
    'numeric'
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from crl.tasks.base import Observation, SeedFolds, StepOutcome, TaskError, TaskSpec
from crl.tasks.checkers import CheckerSpec, item_validator, make_checker
from crl.tasks.jsonl_items import Item, ItemSet, load_items

FAMILY = "jsonl"
DEFAULT_MAX_STEPS = 6
FOLD_STARTS = {"train": 0, "dev": 100_000, "test": 200_000}
TRAIN_SEEDS = 100_000
NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*")


def check_name(name: str) -> str:
    """`name` without a `jsonl/` prefix, or a TaskError when it is not lower-case letters, digits, `_ . -`."""
    short = name.removeprefix(f"{FAMILY}/")
    if not NAME.fullmatch(short):
        raise TaskError(f"bad task name {name!r}: use lower-case letters, digits, '_', '.' or '-' (e.g. arithmetic)")
    return short


def default_name(path: str | Path) -> str:
    """The name a file's task gets when none is given: its stem, lower-cased, other characters as `-`.

    Example: `default_name("data/My Questions.jsonl")` is `"my-questions"`.
    """
    return re.sub(r"[^a-z0-9_.-]+", "-", Path(path).stem.lower()).strip("-.") or "items"


def items_for(path: str | Path, checker: CheckerSpec) -> ItemSet:
    """The validated items of `path` for `checker` (re-read only when the file changes)."""
    path = Path(path).expanduser().resolve()
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise TaskError(f"no items file {path}; give the path of a JSONL file of items") from None
    return _cached_items(path, stat.st_mtime_ns, stat.st_size, checker.model_dump_json())


@lru_cache(maxsize=32)
def _cached_items(path: Path, mtime_ns: int, size: int, checker_json: str) -> ItemSet:
    return load_items(path, item_validator(CheckerSpec.model_validate_json(checker_json)))


def seed_folds(items: ItemSet) -> SeedFolds:
    """The seed ranges of `items`: train wraps over 100,000 seeds, dev and test one seed per item."""
    n = {fold: len(group) for fold, group in items.folds.items()}
    return SeedFolds(
        train=range(0, TRAIN_SEEDS if n["train"] else 0),
        dev=range(FOLD_STARTS["dev"], FOLD_STARTS["dev"] + n["dev"]),
        test=range(FOLD_STARTS["test"], FOLD_STARTS["test"] + n["test"]),
    )


def item_for_seed(items: ItemSet, seed: int) -> tuple[str, Item]:
    """The fold and item that `seed` plays (see the module docstring for the mapping)."""
    if seed < 0:
        raise TaskError(f"seed {seed} is negative; seeds of a JSONL task start at 0")
    fold = "test" if seed >= FOLD_STARTS["test"] else "dev" if seed >= FOLD_STARTS["dev"] else "train"
    group = items.folds[fold]
    if not group:
        raise TaskError(
            f"{items.path} has no {fold} items, so seed {seed} has nothing to play; give some items that split"
        )
    return fold, group[(seed - FOLD_STARTS[fold]) % len(group)]


class JsonlEnv:
    """One JSONL task as a `TextEnv`: `reset(seed)` poses an item, `step(answer)` checks it.

    Args:
        path: the JSONL file of items (`crl.tasks.jsonl_items`).
        checker: a `CheckerSpec`, or a `--checker` string such as "numeric".
        name: the task's name (default `jsonl/<file stem>`).
        judge: for an `llm-judge` checker, sends a prompt to the judging model, returns its reply.
        judge_model: the judging model's name, recorded in every verdict.
    """

    def __init__(
        self,
        path: str | Path,
        checker: CheckerSpec | str,
        *,
        name: str | None = None,
        judge: Callable[[str], str] | None = None,
        judge_model: str | None = None,
    ):
        self.checker_spec = CheckerSpec.parse(checker) if isinstance(checker, str) else checker
        self.items = items_for(path, self.checker_spec)
        self.name = name or f"{FAMILY}/{default_name(path)}"
        self.checker = make_checker(self.checker_spec, judge, judge_model)
        self.item: Item | None = None
        self.fold: str | None = None
        self.done = False

    def reset(self, seed: int) -> Observation:
        """Pose the item `seed` maps to."""
        self.fold, self.item = item_for_seed(self.items, seed)
        self.done = False
        return Observation(text=self.item.text(), goal=self.item.prompt, admissible_actions=None)

    def step(self, action: str) -> StepOutcome:
        """Check the final answer `action`; the episode ends either way."""
        if self.item is None:
            raise RuntimeError("call reset(seed) before step()")
        if self.done:
            raise RuntimeError("the episode is over; call reset(seed) to start a new one")
        verdict = self.checker.check(action, self.item)
        self.done = True
        text = f"{'Correct' if verdict.success else 'Incorrect'}: {verdict.reason}."
        info: dict[str, Any] = {
            "success": verdict.success,
            "verdict": verdict.to_dict(),
            "item": self.item.key,
            "fold": self.fold,
            "invalid": False,
        }
        observation = Observation(text=text, goal=self.item.prompt, admissible_actions=None)
        return StepOutcome(observation, 1.0 if verdict.success else 0.0, True, info)

    def close(self) -> None:
        """Nothing to release."""


def jsonl_spec(
    name: str,
    path: str | Path,
    checker: CheckerSpec,
    tools: tuple[str, ...] = (),
    max_steps: int = DEFAULT_MAX_STEPS,
    description: str | None = None,
) -> TaskSpec:
    """The `TaskSpec` of task `jsonl/<name>` over the items in `path` (read and validated now).

    Args:
        name: the task's name, with or without the `jsonl/` prefix.
        path: the JSONL file of items.
        checker: what decides success.
        tools: references of the tools the agent is offered (`module:function` or `file.py:function`).
        max_steps: the agent's budget of tool calls plus the final answer.
        description: one line for `crl tasks` (default: the file, counts and checker).

    Raises:
        TaskError: a bad name, a missing file, or bad items (listed by line).
    """
    full = f"{FAMILY}/{check_name(name)}"
    items = items_for(path, checker)
    if max_steps < 1:
        raise TaskError(f"max_steps of {full} must be at least 1 (the final answer), got {max_steps}")
    about = description or (
        f"{len(items)} items ({items.sizes()} train/dev/test) from {items.path.name}, checker {checker.label()}"
    )
    return TaskSpec(
        name=full,
        factory=partial(JsonlEnv, items.path, checker, name=full),
        description=about,
        folds=seed_folds(items),
        max_steps=max_steps,
        uses_judge=checker.uses_judge,
        tools=tuple(tools),
    )
