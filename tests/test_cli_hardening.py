"""The CLI and run start-up against careless or hostile input (issue #17's defects 5, 6, 8, 9,
10, 11, bad-input fuzzing and a read-only data directory): each is refused with one line that
names the problem, before a model loads, and leaves no run behind that claims to be running."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import crl.agent.app
from crl.agent.app import start_run
from crl.agent.cli.main import app
from crl.agent.config import load_settings
from crl.agent.llm.scripted import ScriptedModel
from crl.agent.runs import RunStore
from crl.memory.storage.locks import StoreLock

TASK = "keyroom/key"


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, list(args), env=env)


def one_line_error(result, *words: str) -> str:
    """The result failed (exit 1 or typer's usage exit 2) with an error naming `words` and no traceback."""
    assert result.exit_code in (1, 2), result.output
    assert "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    flat = " ".join(result.output.split())  # rich wraps long lines at the terminal's width
    for word in words:
        assert word in flat or word in result.output.replace("\n", ""), (word, result.output)
    return result.output


@pytest.fixture
def model_builds(monkeypatch):
    """Count the language models the CLI builds (each is a scripted one)."""
    built = []

    def build(settings):
        built.append(settings.llm.model)
        return ScriptedModel(lambda messages: " look")

    monkeypatch.setattr(crl.agent.app, "build_chat_model", build)
    return built


def runs_in(home: Path) -> list:
    return [info for kind in ("runs", "evals") for info in RunStore(home / kind).list()]


# ---- 5: numbers are bounds-checked ------------------------------------------------------------


@pytest.mark.parametrize(
    "args, option",
    [
        (["-n", "-1"], "--episodes"),
        (["-n", "0"], "--episodes"),
        (["--seed", "-100000"], "--seed"),
        (["--max-steps", "-5"], "--max-steps"),
        (["--max-steps", "0"], "--max-steps"),
        (["-k", "0"], "--parallel"),
        (["--k-success", "-1"], "--k-success"),
        (["--epsilon", "2"], "--epsilon"),
    ],
)
def test_out_of_range_numbers_are_refused_naming_the_option(crl_home, model_builds, args, option):
    one_line_error(invoke("run", TASK, *args), option)
    assert model_builds == [] and runs_in(crl_home) == []


def test_eval_bounds_too(crl_home, model_builds):
    one_line_error(invoke("eval", TASK, "-n", "0"), "--episodes")
    assert runs_in(crl_home) == []


def test_a_negative_parallel_in_the_config_file_names_file_and_key(crl_home, model_builds, tmp_path):
    (tmp_path / "crl.toml").write_text("[agent]\nparallel = -3\n")
    out = one_line_error(invoke("run", TASK, "-n", "1"), "agent.parallel", "crl.toml", "greater than or equal to 1")
    assert "-3" in out and model_builds == []


def test_start_run_refuses_empty_or_negative_requests(crl_home):
    settings = load_settings({"home": str(crl_home)})
    with pytest.raises(ValueError, match="--episodes must be at least 1"):
        start_run(settings, TASK, 0, model=ScriptedModel([]))
    with pytest.raises(ValueError, match="--seed must be 0 or more"):
        start_run(settings, TASK, 1, seed_start=-100000, model=ScriptedModel([]))
    assert runs_in(crl_home) == []


# ---- 6: a failed start is refused early and leaves no "running" run ---------------------------


def test_a_locked_store_is_refused_at_once_before_the_model_loads(crl_home, model_builds):
    lock = StoreLock(crl_home / "memory")
    try:
        started = time.monotonic()
        r = invoke("run", TASK, "-n", "1")
        took = time.monotonic() - started
    finally:
        lock.release()
    one_line_error(r, "in use by", "--memory-url")
    assert model_builds == [], "the model was built before the lock was checked"
    assert took < 5, f"refusing a second writer took {took:.1f} s"
    assert runs_in(crl_home) == []


def test_an_unreachable_memory_server_is_refused_before_the_model_loads(crl_home, model_builds):
    r = invoke("run", TASK, "-n", "1", "--memory-url", "http://127.0.0.1:9")
    one_line_error(r, "127.0.0.1:9")
    assert model_builds == [] and runs_in(crl_home) == []


@pytest.mark.parametrize(
    "task, words",
    [
        ("keyroom/key?n_rooms=abc", ["n_rooms"]),
        ("keyroom/key?nope=3", ["nope"]),
        ("keyroom/key?n_rooms", ["n_rooms", "key=value"]),
        ("keyroom/nosuch", ["unknown task"]),
        ("keyroom/key?n_rooms=1e400", ["n_rooms must be an integer"]),
        ("keyroom/key?n_rooms=2.5", ["n_rooms must be an integer"]),
        ("keyroom/key?n_rooms=3&n_rooms=4", ["given twice"]),
        ("keyroom/key?n_rooms=99", ["out of range"]),
    ],
)
def test_a_bad_task_or_knob_is_refused_before_the_model_loads(crl_home, model_builds, task, words):
    one_line_error(invoke("run", task, "-n", "1"), *words)
    assert model_builds == [] and runs_in(crl_home) == []


def test_a_missing_model_leaves_no_run_behind(crl_home):
    r = invoke("run", TASK, "-n", "1", "--model", str(crl_home / "no-such-model"), "--no-memory")
    assert r.exit_code != 0
    assert "Traceback" not in r.output
    assert runs_in(crl_home) == []


class Exploding(ScriptedModel):
    def generate(self, batch, config):
        raise RuntimeError("the model process died")


class Interrupted(ScriptedModel):
    def generate(self, batch, config):
        raise KeyboardInterrupt


def test_a_run_that_fails_after_it_started_is_marked_failed_with_the_reason(crl_home):
    settings = load_settings({"home": str(crl_home), "agent": {"policy": "llm", "parallel": 1}})
    with pytest.raises(RuntimeError):
        start_run(settings, TASK, 2, model=Exploding([]))
    with pytest.raises(KeyboardInterrupt):
        start_run(settings, TASK, 2, model=Interrupted([]))
    failed, interrupted = sorted(runs_in(crl_home), key=lambda i: i.created_at)
    assert failed.status == "failed" and failed.error == "RuntimeError: the model process died"
    assert interrupted.status == "interrupted" and interrupted.error is None
    r = invoke("runs", "--json")
    assert {row["status"] for row in json.loads(r.output)} == {"failed", "interrupted"}


# ---- 8: run ids stay inside the data home -----------------------------------------------------


def test_run_ids_cannot_escape_the_data_home(tmp_path, monkeypatch, model_builds):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CRL_HOME", raising=False)
    a, b = tmp_path / "A", tmp_path / "B"
    r = invoke("--home", str(b), "run", TASK, "-n", "1", "--json", "--no-memory")
    assert r.exit_code == 0, r.output
    [victim] = RunStore(b / "runs").list()
    escape = f"../../B/runs/{victim.run_id}"
    for args in (["show", escape], ["explain", escape, "0"], ["run", TASK, "--resume", escape]):
        one_line_error(invoke("--home", str(a), *args), "bad run id")
    one_line_error(invoke("--home", str(a), "show", str(b / "runs" / victim.run_id)), "bad run id")
    assert not (a / "runs").exists() or runs_in(a) == []
    assert [i.status for i in RunStore(b / "runs").list()] == ["finished"]


# ---- 9: credentials in URLs are masked everywhere ---------------------------------------------


def test_credentials_in_a_base_url_never_reach_output_or_run_json(crl_home):
    secret = "SECRET-c4n4ry-9f1e"
    url = f"http://user:{secret}@127.0.0.1:9/v1"
    env = {"CRL_LLM__MAX_RETRIES": "0"}
    r = invoke(
        "run", TASK, "-n", "2", "-k", "1", "--base-url", url, "--model", "m", "--policy", "llm", "--no-memory", env=env
    )
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "127.0.0.1:9" in r.output and secret not in r.output
    [info] = runs_in(crl_home)
    assert info.status == "failed" and "cannot connect" in info.error
    for path in crl_home.rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    for args in (["config", "--json"], ["models", "--json", "--base-url", url, "--model", "m"]):
        r = invoke(*args, env={"CRL_LLM__BASE_URL": url})
        assert r.exit_code == 0 and secret not in r.output and "127.0.0.1:9" in r.output, r.output


# ---- 10: the random baseline loads no language model -----------------------------------------


def test_the_random_policy_never_builds_a_model(crl_home, model_builds):
    r = invoke("run", TASK, "-n", "2", "--policy", "random", "--no-reflect", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.output[r.output.index("{") :])
    assert report["episodes"] == 2 and report["decided_by"] == {"random": report["decided_by"]["random"]}
    r = invoke("eval", TASK, "-n", "1", "--policy", "random", "--json")
    assert r.exit_code == 0, r.output
    assert model_builds == []
    assert not (crl_home / "models").exists()


# ---- 11: config and environment errors name their source -------------------------------------


def test_a_toml_syntax_error_names_the_file(crl_home, tmp_path, model_builds):
    bad = tmp_path / "bad.toml"
    bad.write_text("[agent]\nparallel = \n")
    one_line_error(invoke("--config", str(bad), "config"), str(bad), "line 2")
    bad.write_bytes(b"[llm]\nmodel = '\xff\xfe'\n")
    one_line_error(invoke("--config", str(bad), "config"), str(bad), "UTF-8")


@pytest.mark.parametrize(
    "name, value, words",
    [
        ("CRL_AGENT__PARALLEL", "many", ["CRL_AGENT__PARALLEL", "integer"]),
        ("CRL_LLM__TIMEOUT_S", "-1", ["CRL_LLM__TIMEOUT_S", "greater than 0"]),
        ("CRL_AGENT__TOOLS", "not json", ["CRL_AGENT__TOOLS", "JSON"]),
        ("CRL_LLM__MODLE", "x", ["CRL_LLM__MODLE", "unknown setting"]),
        ("CRL_AGENT", "{broken", ["CRL_AGENT", "JSON"]),
    ],
)
def test_a_bad_environment_value_names_the_variable(crl_home, name, value, words):
    one_line_error(invoke("config", env={name: value}), *words)


def test_a_secret_in_a_bad_setting_is_not_echoed(crl_home):
    r = invoke("config", env={"CRL_LLM": '{"api_key": 12345678901, "timeout_s": "x"}'})
    one_line_error(r, "CRL_LLM", "llm.timeout_s")
    assert "12345678901" not in r.output


# ---- fuzzing: task names with knobs, config files, environment values -------------------------

FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
knob_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@FUZZ
@given(
    base=st.sampled_from(["keyroom/key", "keyroom/door", "keyroom", "nosuch/x", ""]),
    knobs=st.lists(st.tuples(knob_text, knob_text), max_size=3),
    raw=knob_text,
)
def test_fuzzed_task_names_are_refused_cleanly_or_accepted(crl_home, model_builds, base, knobs, raw):
    query = "&".join(f"{k}={v}" for k, v in knobs) + raw
    task = f"{base}?{query}" if query else base
    r = invoke("run", task, "-n", "1", "--no-memory", "--max-steps", "1")
    assert "Traceback" not in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    if r.exit_code != 0:
        assert "error:" in r.output or "Error" in r.output
    assert all(info.status != "running" for info in runs_in(crl_home))


toml_values = st.one_of(
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.text(max_size=8),
    st.lists(st.integers(-5, 5), max_size=3),
)
toml_keys = st.sampled_from(
    ["parallel", "max_steps", "history_window", "fuzzy_threshold", "policy", "memory", "nope", "max_prompt_tokens"]
)


def toml_literal(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(str(v), repr(v))
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(map(str, v)) + "]"
    return str(v)


@FUZZ
@given(
    section=st.sampled_from(["agent", "llm", "retrieval", "bogus"]),
    entries=st.dictionaries(toml_keys, toml_values, max_size=3),
    garbage=st.sampled_from(["", "\n[", "\nx = ", "\n= 1", "\n[agent]\n[agent]"]),
)
def test_fuzzed_config_files_are_refused_naming_the_file_or_accepted(crl_home, tmp_path, section, entries, garbage):
    path = tmp_path / "fuzz.toml"
    path.write_text(f"[{section}]\n" + "".join(f"{k} = {toml_literal(v)}\n" for k, v in entries.items()) + garbage)
    r = invoke("--config", str(path), "config", "--json")
    assert "Traceback" not in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    if r.exit_code != 0:
        assert str(path) in r.output, r.output


@FUZZ
@given(
    name=st.sampled_from(
        ["CRL_AGENT__PARALLEL", "CRL_LLM__TEMPERATURE", "CRL_AGENT__TOOLS", "CRL_AGENT", "CRL_LLM__SEED", "CRL_X"]
    ),
    value=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",), exclude_characters="\x00"), max_size=10),
)
def test_fuzzed_environment_values_are_refused_naming_the_variable_or_accepted(crl_home, name, value):
    r = invoke("config", "--json", env={name: value})
    assert "Traceback" not in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    if r.exit_code != 0:
        assert name in r.output, r.output


# ---- a read-only or unwritable data directory -------------------------------------------------


def test_a_home_whose_parent_is_a_file_is_a_clear_error(tmp_path, model_builds, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    home = blocker / "home"
    r = invoke("--home", str(home), "run", TASK, "-n", "1")
    one_line_error(r, str(blocker))
    assert model_builds == [] and blocker.read_text() == "not a folder"


@pytest.fixture
def read_only_home(tmp_path):
    """A data home that holds one finished run, then bind-mounted read-only (root ignores chmod);
    skipped where mounting is not allowed."""
    source = tmp_path / "home"
    source.mkdir()
    mounted = tmp_path / "ro-home"
    mounted.mkdir()
    yield source, mounted
    subprocess.run(["umount", str(mounted)], capture_output=True)


def snapshot(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("*")) if p.is_file()}


def test_a_read_only_home_is_a_clear_error_and_nothing_is_written(read_only_home, monkeypatch, model_builds):
    source, mounted = read_only_home
    monkeypatch.chdir(source.parent)
    monkeypatch.delenv("CRL_HOME", raising=False)
    r = invoke("--home", str(source), "run", TASK, "-n", "1", "--json")
    assert r.exit_code == 0, r.output
    mount = subprocess.run(["mount", "--bind", "-o", "ro", str(source), str(mounted)], capture_output=True)
    if mount.returncode != 0 or os.access(mounted, os.W_OK) and _writable(mounted):
        pytest.skip(f"cannot make a read-only bind mount here: {mount.stderr.decode().strip()}")
    before = snapshot(mounted)
    builds = len(model_builds)
    r = invoke("--home", str(mounted), "run", TASK, "-n", "1")
    one_line_error(r, "Read-only file system")
    assert len(model_builds) == builds, "the model was built for a run that could not be stored"
    assert snapshot(mounted) == before
    r = invoke("--home", str(mounted), "runs", "--json")
    assert r.exit_code == 0 and [row["status"] for row in json.loads(r.output)] == ["finished"]


def _writable(folder: Path) -> bool:
    probe = folder / ".probe"
    try:
        probe.write_text("x")
    except OSError:
        return False
    probe.unlink()
    return True


@pytest.fixture
def tiny_disk(tmp_path):
    """A 1 MiB tmpfs to play a data home on (a full disk on demand); skipped where mounting is not allowed."""
    where = tmp_path / "tiny"
    where.mkdir()
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.decode().strip()}")
    yield where
    subprocess.run(["umount", str(where)], capture_output=True)


def test_a_full_disk_mid_run_is_a_clear_error_and_the_run_resumes_after(tiny_disk, monkeypatch, model_builds):
    monkeypatch.chdir(tiny_disk.parent)
    monkeypatch.delenv("CRL_HOME", raising=False)
    home = tiny_disk / "home"
    filler = tiny_disk / "filler"
    filler.write_bytes(b"\0" * (1000 * 1024))
    args = ["--home", str(home), "run", TASK, "-n", "40", "-k", "1", "--max-steps", "8", "--no-memory"]
    r = invoke(*args)
    one_line_error(r, "No space left on device")
    [info] = runs_in(home)
    assert info.status in ("running", "failed")  # with no room left, run.json may not take the news
    assert not list(home.rglob("*.tmp")), "a half-written temporary file was left behind"
    log = home / "runs" / info.run_id / "episodes.jsonl"
    lines = log.read_bytes().splitlines()
    assert lines and all(json.loads(line) for line in lines[:-1])  # at most the tail is torn
    filler.unlink()
    r = invoke("--home", str(home), "run", TASK, "--resume", info.run_id, "--no-memory", "--json")
    assert r.exit_code == 0, r.output
    episodes = RunStore(home / "runs").episodes(info.run_id)
    assert len([e for e in episodes if e.finished and not e.episode_id.endswith("-retry")]) == 40
    assert RunStore(home / "runs").load(info.run_id).status == "finished"


def test_a_run_whose_every_episode_errored_exits_1_after_its_report(crl_home):
    args = ["run", TASK, "-n", "1", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--policy", "llm"]
    r = invoke(*args, "--no-memory", "--json", env={"CRL_LLM__MAX_RETRIES": "0"})
    assert r.exit_code == 1 and "Traceback" not in r.output
    report = json.loads(r.output[r.output.index("{") : r.output.rindex("}") + 1])
    assert report["episodes"] == 0 and report["errored"] == 2  # the episode and its one retry
    assert "every episode ended in an error" in " ".join(r.output.split())
    [info] = runs_in(crl_home)
    assert info.status == "finished"
