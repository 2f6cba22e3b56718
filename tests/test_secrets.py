"""A canary API key in the environment never appears in anything `crl` prints, logs or writes:
a real run through the openai backend (against the local test server, which demands the key),
a refused key, `crl config`, `crl memory export` and an SFT dataset build, then every file under
the data home and every captured line is searched for it."""

from __future__ import annotations

import logging

import pytest
from typer.testing import CliRunner

from crl.agent.cli.main import app
from crl.agent.llm.scripted import ScriptedModel
from crl.tasks.keyroom import solve
from crl.tasks.registry import fold_seeds
from tests.openai_test_server import serve_chat_model

CANARY = "sk-canary-7d1f0e93b2c4a5"
TASK = "keyroom/key"


@pytest.fixture
def keyed_server():
    """A solver behind the test server that accepts only the canary key."""
    seeds = fold_seeds(TASK, "train", 2)
    model = ScriptedModel([f"Action: {a}" for s in seeds for a in solve(s, "key")])
    server, url = serve_chat_model(model, api_key=CANARY)
    yield server, url
    server.stop()


def test_a_canary_key_appears_in_no_output_log_or_file(crl_home, tmp_path, keyed_server, caplog, embedded_models_dir):
    from crl.agent.llm.embedded import embedded_model_path

    server, url = keyed_server
    env = {"OPENAI_API_KEY": CANARY, "CRL_LLM__API_KEY": CANARY, "CRL_LLM__MAX_RETRIES": "0"}
    runner = CliRunner()
    outputs = []

    def crl(*args, ok=True, extra_env=None):
        result = runner.invoke(app, list(args), env=env | (extra_env or {}))
        outputs.append(result.output)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            outputs.append(repr(result.exception))
        if ok:
            assert result.exit_code == 0, result.output
        return result

    caplog.set_level(logging.DEBUG)
    model_flags = ["--base-url", url, "--model", "scripted", "--policy", "llm"]
    crl("-vv", "run", TASK, "-n", "2", "-k", "1", *model_flags, "--json")
    assert any(status == 200 for _, _, status in server.requests), "the key was not accepted by the server"

    refused = crl("run", TASK, "-n", "1", *model_flags, ok=False, extra_env={"CRL_LLM__API_KEY": CANARY + "x"})
    assert refused.exit_code == 1 and "authentication failed (401)" in " ".join(refused.output.split())

    crl("config")
    crl("config", "--json")
    crl("models", "--json", *model_flags[:4])
    crl("runs", "--json")
    crl("memory", "export", str(crl_home / "export.jsonl"))
    base = str(embedded_model_path(embedded_models_dir))
    crl("dataset", "build", "sft", "--base", base, "--json")

    assert (crl_home / "export.jsonl").stat().st_size > 0
    assert list((crl_home / "datasets").rglob("*.jsonl")), "no dataset was written"
    written = [p for p in crl_home.rglob("*") if p.is_file()]
    assert any(p.name == "run.json" for p in written) and any(p.name == "episodes.jsonl" for p in written)
    leaks = [str(p) for p in written if CANARY.encode() in p.read_bytes()]
    assert leaks == []
    assert all(CANARY not in text for text in outputs)
    assert all(CANARY not in record.getMessage() for record in caplog.records)
    assert CANARY not in caplog.text


@pytest.mark.parametrize(
    "text, hidden, kept",
    [
        ("http://user:pw-123456@127.0.0.1:9/v1", "pw-123456", "127.0.0.1:9/v1"),
        ("see https://tok3n-abcdef@host.example/x", "tok3n-abcdef", "host.example/x"),
        ("http://h:1/mcp?token=abcdef123&x=1", "abcdef123", "x=1"),
        ("Authorization: Bearer sk-abcdef123456", "sk-abcdef123456", "Authorization"),
    ],
)
def test_redact_text_masks_userinfo_query_keys_and_bearer_tokens(text, hidden, kept):
    from crl.agent.redaction import redact_text

    cleaned = redact_text(text, ())
    assert hidden not in cleaned and kept in cleaned and "***" in cleaned


def test_environment_keys_are_masked_but_counts_named_like_tokens_are_not(monkeypatch):
    from crl.agent.redaction import is_secret_key, redact_settings, redact_text

    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    monkeypatch.setenv("CRL_AGENT__MAX_PROMPT_TOKENS", "200000")
    assert redact_text(f"key={CANARY}; budget 200000") == "key=***; budget 200000"
    assert [is_secret_key(k) for k in ("api_key", "HF_TOKEN", "api_key_env", "max_new_tokens")] == [
        True,
        True,
        False,
        False,
    ]
    saved = redact_settings({"llm": {"api_key": "x", "base_url": "http://u:p4ssw0rd@h/v1", "max_new_tokens": 48}})
    assert saved == {"llm": {"api_key": "***", "base_url": "http://***@h/v1", "max_new_tokens": 48}}
