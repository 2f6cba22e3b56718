"""The command line's shared layer: `emit`, fitted tables, choice options, logging flags, and
that every CLI module imports alone, quickly, without the heavy libraries."""

from __future__ import annotations

import io
import json
import logging
import pkgutil
import subprocess
import sys
from typing import get_args

import pytest
from rich.console import Console
from typer.testing import CliRunner

import crl.agent.app
import crl.agent.cli
from crl.agent.cli import common
from crl.agent.cli.common import Col, emit
from crl.agent.cli.main import app
from crl.agent.config import AgentSettings, LLMSettings
from crl.agent.llm.scripted import ScriptedModel
from crl.finetune.config import FinetuneConfig
from crl.memory.retrieval.config import RetrievalConfig
from crl.memory.synthesis.config import SynthesisConfig
from crl.tasks.keyroom import solve
from crl.tasks.registry import fold_seeds

HEAVY = ("torch", "transformers", "peft", "trl", "chromadb", "sentence_transformers", "datasets", "scipy", "accelerate")
LONG_MODEL = "a-model-name-long-enough-to-crowd-a-narrow-terminal"


@pytest.fixture
def printed(monkeypatch) -> io.StringIO:
    """What `emit` prints, on a 60-column console without colour."""
    buffer = io.StringIO()
    monkeypatch.setattr(common, "out", Console(file=buffer, width=60, color_system=None))
    return buffer


ROWS = [
    {"id": "20261201-223642-7e36", "task": "keyroom/compound", "model": LONG_MODEL, "rate": 0.5},
    {"id": "20261201-230000-aa01", "task": "keyroom/key", "model": LONG_MODEL, "rate": 1.0},
]
COLUMNS = [Col("id"), Col("task", drop=1), Col("model", drop=2), Col("rate", right=True, fmt=lambda r: f"{r:.0%}")]


def test_emit_prints_json_for_scripts(printed):
    emit(ROWS, True, COLUMNS, title="runs")
    assert json.loads(printed.getvalue()) == ROWS


def test_emit_table_drops_the_least_important_columns_and_never_cuts_ids(printed):
    emit(ROWS, False, COLUMNS, title="runs")
    lines = printed.getvalue().splitlines()
    assert all(len(line) <= 60 for line in lines)
    assert all(any(r["id"] in line for line in lines) for r in ROWS)
    assert "keyroom/compound" in printed.getvalue() and "50%" in printed.getvalue() and "100%" in printed.getvalue()
    assert LONG_MODEL[:10] not in printed.getvalue()  # the model column went first (highest drop)
    assert "hidden to fit the terminal: model" in printed.getvalue()


def test_emit_table_keeps_every_column_when_it_fits(monkeypatch):
    buffer = io.StringIO()
    monkeypatch.setattr(common, "out", Console(file=buffer, width=200, color_system=None))
    emit(ROWS, False, COLUMNS)
    assert LONG_MODEL in buffer.getvalue() and "hidden" not in buffer.getvalue()


def test_emit_prints_strings_as_they_are_and_dicts_as_pairs(printed):
    emit({"a": 1}, False, "removed [bold]ep:1[/bold]")
    assert printed.getvalue().strip() == "removed [bold]ep:1[/bold]"
    printed.truncate(0)
    printed.seek(0)
    emit({"backend": "local", "model": "m"}, False, title="model in effect")
    text = printed.getvalue()
    assert "model in effect" in text and "backend" in text and "local" in text


def test_emit_calls_a_view_only_for_people(printed):
    seen = []
    emit({"x": 1}, True, lambda: seen.append("drawn"))
    assert seen == [] and json.loads(printed.getvalue()) == {"x": 1}
    emit({"x": 1}, False, lambda: seen.append("drawn"))
    assert seen == ["drawn"]


@pytest.mark.parametrize(
    ("choice", "model", "field"),
    [
        (common.Backend, LLMSettings, "backend"),
        (common.MemoryMode, AgentSettings, "memory"),
        (common.Policy, AgentSettings, "policy"),
        (common.Rerank, RetrievalConfig, "rerank"),
        (common.RoundKind, FinetuneConfig, "auto_kind"),
        (common.Similarity, SynthesisConfig, "similarity"),
    ],
)
def test_choice_options_accept_exactly_what_the_settings_accept(choice, model, field):
    assert [c.value for c in choice] == list(get_args(model.model_fields[field].annotation))


def invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["run", "keyroom/key", "--policy", "smart"], "--policy"),
        (["run", "keyroom/key", "--memory", "some"], "--memory"),
        (["eval", "keyroom/key", "--backend", "cloud"], "--backend"),
        (["eval", "keyroom/key", "--rerank", "best"], "--rerank"),
        (["eval", "keyroom/key", "--fold", "train"], "--fold"),
        (["finetune", "auto", "--kind", "ppo"], "--kind"),
        (["dataset", "build", "grpo"], "'kind'"),
    ],
)
def test_a_wrong_choice_is_refused_by_the_parser(crl_home, args, option):
    r = invoke(*args)
    assert r.exit_code == 2 and "Invalid value" in r.output and option in r.output
    assert not (crl_home / "runs").exists()


def test_help_lists_the_choices_and_shows_no_type_beside_flags(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    text = invoke("run", "--help").output
    assert "<llm|memory|mixed|posterior|random>" in text and "<off|cases|steps|full>" in text
    assert "<auto|local|openai>" in text and "<default|cross-encoder>" in text
    assert "<bool>" not in text and "<bool>" not in invoke("--help").output


@pytest.fixture
def root_logging():
    """Restore the root logger's level and handlers after a test that configures logging."""
    root = logging.getLogger()
    level, handlers = root.level, root.handlers[:]
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize(
    ("flags", "level"),
    [
        (["-v"], logging.INFO),
        (["-vv"], logging.DEBUG),
        (["--log-level", "error"], logging.ERROR),
        (["--log-level", "DEBUG"], logging.DEBUG),
        (["-v", "--log-level", "warning"], logging.WARNING),
    ],
)
def test_verbose_and_log_level_set_the_root_logger(crl_home, root_logging, flags, level):
    root_logging.setLevel(logging.CRITICAL)
    assert invoke(*flags, "tasks", "--json").exit_code == 0
    assert root_logging.level == level


def test_without_logging_flags_logging_is_left_alone(crl_home, root_logging):
    root_logging.setLevel(logging.CRITICAL)
    assert invoke("tasks", "--json").exit_code == 0
    assert root_logging.level == logging.CRITICAL
    assert invoke("--log-level", "loud", "tasks").exit_code == 2


def test_runs_at_80_columns_shows_whole_ids_and_outcomes(crl_home, monkeypatch):
    seeds = fold_seeds("keyroom/key", "train", 2)
    model = ScriptedModel([f" {a}" for s in seeds for a in solve(s, "key")], name=LONG_MODEL)
    monkeypatch.setattr(crl.agent.app, "build_chat_model", lambda settings: model)
    for seed in range(2):
        r = invoke(
            "run", "keyroom/key", "-n", "1", "--seed", seed, "--parallel", "1", "--no-memory", "--no-reflect", "--json"
        )
        assert r.exit_code == 0, r.output
    monkeypatch.setenv("COLUMNS", "80")
    assert common.out.width == 80
    rows = json.loads(invoke("runs", "--json").stdout)
    lines = invoke("runs").stdout.splitlines()
    assert len(rows) == 2 and all(len(line) <= 80 for line in lines)
    for r in rows:
        assert any(r["run_id"] in line and f"{r['success_rate']:.0%}" in line for line in lines)
    assert "…" not in "".join(lines) and any("hidden to fit the terminal: model" in line for line in lines)


def test_config_at_80_columns_never_cuts_a_key(crl_home, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    keys = [row["key"] for row in json.loads(invoke("config", "--json").stdout)]
    text = invoke("config").stdout
    assert keys and all(key in text for key in keys)
    assert "…" not in text


def cli_modules() -> list[str]:
    return [f"crl.agent.cli.{m.name}" for m in pkgutil.iter_modules(crl.agent.cli.__path__)]


@pytest.mark.parametrize("module", cli_modules())
def test_each_cli_module_imports_alone_without_heavy_libraries(module):
    probe = f"import sys, json; import {module}; print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == []
