"""Fixtures for the user-task tests: a registry restored after each test, and items files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crl.tasks import registry


@pytest.fixture
def clean_registry():
    """The task registry as it was before the test (registered tasks, added-task file, plugins)."""
    saved = (
        dict(registry._TASKS),
        dict(registry._ORIGIN),
        dict(registry._PROBLEMS),
        set(registry._loaded),
        registry._user_file,
    )
    yield registry
    registry._TASKS.clear()
    registry._TASKS.update(saved[0])
    registry._ORIGIN.clear()
    registry._ORIGIN.update(saved[1])
    registry._PROBLEMS.clear()
    registry._PROBLEMS.update(saved[2])
    registry._loaded.clear()
    registry._loaded.update(saved[3])
    registry._user_file = saved[4]


def write_items(path: Path, items: list[dict]) -> Path:
    """`items` as a JSONL file at `path`."""
    path.write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    return path


def qa_items(n: int = 30) -> list[dict]:
    """`n` multiplication questions without splits (folds by hash), answers as numbers."""
    return [{"id": f"q{i}", "prompt": f"What is {i} times 7?", "answer": i * 7} for i in range(n)]
