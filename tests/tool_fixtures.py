"""Tools, a question-answering task and a scripted-model helper shared by the tool tests."""

from __future__ import annotations

import asyncio
import time
from enum import Enum
from typing import Literal

from crl.agent.tools import tool
from crl.tasks.base import Observation, StepOutcome, TaskSpec

CALLS: list[str] = []


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expression: the expression, e.g. "2 * (3 + 4)"
    """
    CALLS.append(expression)
    if not set(expression) <= set("0123456789+-*/(). "):
        raise ValueError(f"only numbers and + - * / ( ) are allowed, not {expression!r}")
    return str(eval(expression))  # noqa: S307 - the characters are checked above


def explode(reason: str) -> str:
    """A tool that always fails.

    Args:
        reason: what to complain about
    """
    raise RuntimeError(f"exploded: {reason}")


@tool(timeout_s=0.2)
async def slow(seconds: float) -> str:
    """Sleep, then answer.

    Args:
        seconds: how long to sleep
    """
    await asyncio.sleep(seconds)
    return "woke up"


def blocking(seconds: float) -> str:
    """Sleep in a thread.

    Args:
        seconds: how long to sleep
    """
    time.sleep(seconds)
    return "done"


class Unit(Enum):
    CELSIUS = "C"
    FAHRENHEIT = "F"


def convert(
    value: float,
    unit: Unit,
    precision: int | None = None,
    mode: Literal["round", "floor"] = "round",
    tags: list[str] | None = None,
    weights: dict[str, float] | None = None,
    pair: tuple[int, str] | None = None,
    flavour: str = "plain",
) -> str:
    """Convert a temperature.

    Args:
        value: the temperature
        unit: the unit to convert to
        precision: digits after the point; the description
            goes on over two lines
        mode: how to cut the digits
        tags: labels for the result
        weights: a weight per label
        pair: a number and its name
        flavour (str): how it tastes (choices: ["plain", "spicy"])

    Returns:
        The converted temperature.
    """
    return f"{value}{unit}"


class QuestionEnv:
    """A JSONL-like task: one question, `step(answer)` checks it and ends the episode."""

    name = "qa"

    def __init__(self, question: str = "What is 17 * 23?", answer: str = "391") -> None:
        self.question, self.answer = question, answer

    def reset(self, seed: int) -> Observation:
        return Observation(self.question, self.question)

    def step(self, action: str) -> StepOutcome:
        ok = action.strip() == self.answer
        verdict = {"expected": self.answer, "given": action}
        return StepOutcome(
            Observation("correct" if ok else "wrong", self.question),
            float(ok),
            True,
            {"success": ok, "verdict": verdict},
        )

    def close(self) -> None:
        pass


QA_SPEC = TaskSpec(
    "qatools/mul",
    lambda: QuestionEnv(),
    "One multiplication question, with a calculator.",
    max_steps=5,
    tools=("tests.tool_fixtures:calculator",),
)
