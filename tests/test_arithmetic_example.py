"""The arithmetic example: its generator reproduces the committed items, its calculator computes
safely, and the task registers and plays as the example's README says."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crl.agent.cli.main import app
from crl.tasks.refs import resolve_ref
from crl.tasks.registry import fold_seeds, make_env
from tests.task_fixtures import clean_registry  # noqa: F401

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "arithmetic"
calculator = resolve_ref(f"{EXAMPLE / 'tools.py'}:calculator")
generator = resolve_ref(f"{EXAMPLE / 'generate.py'}:generate")


def committed_items() -> list[dict]:
    return [json.loads(line) for line in (EXAMPLE / "items.jsonl").read_text().splitlines()]


def test_the_committed_items_are_what_the_generator_makes():
    items = committed_items()
    assert items == generator(240, 0) and generator(240, 0) == generator(240, 0)
    assert generator(240, 1) != items


def test_items_have_answers_ids_and_balanced_folds():
    items = committed_items()
    assert len(items) >= 240 and len({i["id"] for i in items}) == len(items)
    assert Counter(i["split"] for i in items) == {"train": 168, "dev": 36, "test": 36}
    kinds = {fold: Counter(i["prompt"].split()[1] for i in items if i["split"] == fold) for fold in ("dev", "test")}
    assert kinds["dev"] == kinds["test"], "every fold holds every kind of problem alike"
    assert all(isinstance(i["answer"], int | float) and i["answer"] >= 0 for i in items)


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("37 * 48 + 12", "1788"),
        ("37 x 48", "1776"),
        ("37×48 =", "1776"),
        ("1,250 / 5", "250"),
        ("2^10", "1024"),
        ("round(72 * 0.75, 2)", "54"),
        ("10 / 4", "2.5"),
        ("-(3 - 5) * 2", "4"),
        ("sqrt(2)", "1.414213562"),
    ],
)
def test_calculator_computes(expression, value):
    assert calculator(expression) == value


@pytest.mark.parametrize(
    ("expression", "complaint"),
    [
        ("__import__('os').system('true')", "not arithmetic"),
        ("(1).__class__", "not arithmetic"),
        ("open('x')", "not arithmetic"),
        ("x + 1", "not arithmetic"),
        ("1 / 0", "divides by zero"),
        ("9 ** 9 ** 9", "too large"),
        ("sqrt(-1)", "failed"),
        ("37 *", "cannot read"),
        ("1" * 300, "longer than"),
    ],
)
def test_calculator_refuses_what_is_not_safe_arithmetic(expression, complaint):
    with pytest.raises(ValueError, match=complaint):
        calculator(expression)


def test_calculator_schema_reads_from_its_signature_and_docstring():
    from transformers.utils import get_json_schema

    schema = get_json_schema(calculator)["function"]
    assert schema["name"] == "calculator" and schema["parameters"]["required"] == ["expression"]
    assert schema["parameters"]["properties"]["expression"]["type"] == "string"


def test_the_readme_registration_plays_with_the_calculator(crl_home, clean_registry, monkeypatch):
    monkeypatch.chdir(EXAMPLE.parents[1])
    r = CliRunner().invoke(
        app,
        ["tasks", "add", "examples/arithmetic/items.jsonl", "--name", "arithmetic", "--checker", "numeric",
         "--abs-tol", "0.01", "--tool", "examples/arithmetic/tools.py:calculator", "--json"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["items"] == "240 (168/36/36 train/dev/test)"
    env = make_env("jsonl/arithmetic")
    seed = fold_seeds("jsonl/arithmetic", "dev", 1)[0]
    obs = env.reset(seed)
    assert obs.text.startswith("A shop sells notebooks at")
    words = obs.text.split()
    price, count = words[words.index("at") + 1], words[words.index("do") + 1]
    assert env.step(calculator(f"{price} * {count}")).info["success"]
    env.reset(seed)
    assert not env.step(calculator(f"{price} + {count}")).info["success"]
