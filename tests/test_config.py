import json

import pytest
from typer.testing import CliRunner

from crl.agent.cli.main import app
from crl.agent.config import explain_settings, load_settings


def write_toml(path, text):
    path.write_text(text)
    return path


def test_precedence_defaults_toml_env_flags(crl_home, monkeypatch, tmp_path):
    write_toml(tmp_path / "crl.toml", '[llm]\nmodel = "toml-model"\ntemperature = 0.5\nmax_new_tokens = 10\n')
    assert load_settings().llm.model == "toml-model"
    monkeypatch.setenv("CRL_LLM__TEMPERATURE", "0.7")
    monkeypatch.setenv("CRL_LLM__MAX_NEW_TOKENS", "20")
    flags = {"llm": {"max_new_tokens": 30}}
    s = load_settings(flags)
    assert s.llm.model == "toml-model"
    assert s.llm.temperature == 0.7
    assert s.llm.max_new_tokens == 30
    assert s.llm.top_p == 1.0
    sources = {k: src for k, _, src in explain_settings(s, flags)}
    assert sources["llm.model"].endswith("crl.toml")
    assert sources["llm.temperature"] == "env CRL_LLM__TEMPERATURE"
    assert sources["llm.max_new_tokens"] == "flag"
    assert sources["llm.top_p"] == "default"


def test_unknown_key_in_toml_is_rejected(crl_home, tmp_path):
    write_toml(tmp_path / "crl.toml", "[llm]\nmodle = 'typo'\n")
    with pytest.raises(ValueError):
        load_settings()


def test_explicit_config_file_must_exist(crl_home):
    with pytest.raises(FileNotFoundError):
        load_settings(config_file="nope.toml")


def test_crl_config_masks_secrets_and_shows_sources(crl_home, monkeypatch):
    monkeypatch.setenv("CRL_LLM__API_KEY", "sk-very-secret")
    result = CliRunner().invoke(app, ["config", "--json"])
    assert result.exit_code == 0, result.output
    assert "sk-very-secret" not in result.output
    rows = {r["key"]: r for r in json.loads(result.output)}
    assert rows["llm.api_key"]["value"] == "***"
    assert rows["llm.api_key"]["source"] == "env CRL_LLM__API_KEY"
    assert rows["home"]["source"] == "env CRL_HOME"


def test_crl_models_explains_choice(crl_home):
    r = CliRunner().invoke(app, ["models", "--json"])
    assert r.exit_code == 0, r.output
    row = json.loads(r.output)
    assert row["backend"] == "local" and "embedded" in row["model"]
    r = CliRunner().invoke(app, ["models", "--json", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"])
    row = json.loads(r.output)
    assert row["backend"] == "openai" and "base_url" in row["reason"]
    r = CliRunner().invoke(app, ["models", "--backend", "openai"])
    assert r.exit_code == 1 and "needs a model name" in r.output
