"""The public Python API: `import crl` stays light, and the README's example runs as printed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import crl
from crl.agent.llm.scripted import ScriptedModel
from crl.tasks.keyroom import solve
from crl.tasks.registry import fold_seeds

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_example() -> str:
    section = README.read_text().split("### Python API", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_import_crl_loads_no_heavy_library():
    code = (
        "import sys, crl; crl.settings; crl.run; "
        "heavy = [m for m in ('torch', 'transformers', 'chromadb', 'peft', 'trl') if m in sys.modules]; "
        "print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/").stdout
    assert out.strip() == "[]"


def test_every_exported_name_resolves():
    for name in crl.__all__:
        assert getattr(crl, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        crl.nope  # noqa: B018


def test_settings_layers_arguments_over_the_environment(crl_home, monkeypatch):
    monkeypatch.setenv("CRL_AGENT__PARALLEL", "3")
    assert crl.settings().agent.parallel == 3
    assert crl.settings(agent={"parallel": 5}).agent.parallel == 5
    assert crl.settings(home="elsewhere").home == Path("elsewhere")


def test_evaluate_refuses_the_train_fold(crl_home):
    with pytest.raises(ValueError, match="held-out"):
        crl.evaluate("keyroom/key", 1, fold="train")


def test_evaluate_with_retries_replays_the_lost_seeds_from_the_package(crl_home):
    never = ScriptedModel(lambda messages: json.dumps({"look": 0.0}))
    cfg = crl.settings(agent={"policy": "posterior", "max_steps": 2, "parallel": 1}, memory={"enabled": False})
    result = crl.evaluate_with_retries("keyroom/key", 2, attempts=2, settings=cfg, model=never)
    assert isinstance(result, crl.RetryResult)
    assert [len(a.episodes) for a in result.attempts] == [2, 2] and result.report()["solved_within"] == 0
    with pytest.raises(ValueError, match="held-out"):
        crl.evaluate_with_retries("keyroom/key", 1, fold="train")


@pytest.mark.slow
def test_the_readme_example_runs(crl_home, monkeypatch, embedded_models_dir, capsys):
    """The README's example, executed as printed: a scripted solver stands in for the model so the
    run is quick and succeeds; the bank, the embedder, dataset building and LoRA training are real."""
    seeds = fold_seeds("keyroom/key", "train", 8)
    solver = ScriptedModel([f" {a}" for s in seeds for a in solve(s, "key")])
    monkeypatch.setattr("crl.agent.app.build_chat_model", lambda settings: solver)
    for key, value in {
        "AGENT__PARALLEL": "1",
        "AGENT__POLICY": "llm",
        "AGENT__REPLY_FORMAT": "action",
        "REFLECT__ENABLED": "false",
        "FINETUNE__MAX_STEPS": "2",
        "FINETUNE__SAVE_STEPS": "2",
        "FINETUNE__BATCH_SIZE": "1",  # two real optimizer steps of one example: the 2x4x2 default took 3 min
        "FINETUNE__GRADIENT_ACCUMULATION": "1",
    }.items():
        monkeypatch.setenv(f"CRL_{key}", value)
    monkeypatch.setenv("CRL_MODEL_CACHE", str(embedded_models_dir))

    exec(compile(readme_example(), str(README), "exec"), {})

    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("1.0 ")
    assert lines[1].startswith("[") and "ep:" in lines[1]
    adapter_id = lines[2].split()[0]
    assert (crl_home.parent / ".crl-demo" / "adapters" / adapter_id).is_dir()
