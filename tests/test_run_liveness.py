"""A run whose process died is "interrupted", not "running" forever; `crl runs` lists one namespace's
runs, or every namespace's with `--all-namespaces`.

The kill is real: a `crl run --policy random` subprocess (no model loads) is killed with SIGKILL
mid-run, then `crl runs`, `crl show` and `RunStore` read it back as interrupted and `--resume`
finishes it. Writer checks use real processes (a `sleep`), so a live writer, a dead one, a recycled
pid and a writer on another host are each what the kernel says they are.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from crl.agent.cli.main import app
from crl.agent.runs import RunInfo, RunStore, process_started

CRL = str(Path(sys.executable).parent / "crl")


def invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def env() -> dict[str, str]:
    return os.environ | {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "CRL_THREADS": "1", "COLUMNS": "200"}


def kill_mid_run(home: Path, episodes: int) -> str:
    """Start `crl run --policy random`, SIGKILL it once its log holds a step; the run id."""
    proc = subprocess.Popen(
        [CRL, "--home", home, "run", "keyroom/key", "--policy", "random", "-n", str(episodes), "--no-memory"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env(),
    )
    deadline = time.time() + 120
    try:
        while not any(p.stat().st_size for p in home.glob("runs/*/episodes.jsonl")):
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            assert time.time() < deadline, "the run never logged a step"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    [run] = [p.name for p in (home / "runs").iterdir()]
    return run


def test_a_run_killed_with_sigkill_is_interrupted_and_resumes(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("CRL_HOME", str(home))
    monkeypatch.setenv("COLUMNS", "200")
    run = kill_mid_run(home, 600)
    recorded = json.loads((home / "runs" / run / "run.json").read_text())
    assert recorded["status"] == "running" and recorded["host"] == socket.gethostname()  # as the kill left it
    assert recorded["pid"] > 0 and recorded["pid_started"] is not None

    [info] = RunStore(home / "runs").list()
    assert info.status == "interrupted"
    [row] = json.loads(invoke("runs", "--json").stdout)
    assert row["status"] == "interrupted" and row["pid"] == recorded["pid"] and row["last_active"] > 0
    assert "interrupted" in invoke("runs").stdout
    shown = " ".join(invoke("show", run, "0").stdout.split())
    assert "interrupted" in shown and f"crl run --resume {run}" in shown

    resumed = subprocess.run(
        [CRL, "--home", home, "run", "keyroom/key", "--resume", run, "--no-memory", "--json"],
        capture_output=True,
        text=True,
        env=env(),
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads(resumed.stdout)["episodes"] == 600
    [row] = json.loads(invoke("runs", "--json").stdout)
    assert row["status"] == "finished" and row["episodes"] == "600/600" and row["pid"] != recorded["pid"]


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(["sleep", "60"])
    yield proc
    proc.kill()
    proc.wait()


def write_run(store: RunStore, run_id: str, **fields) -> None:
    info = RunInfo(run_id=run_id, kind="run", task="keyroom/key", seeds=[0], model="m", **fields)
    store.path(run_id).mkdir(parents=True)
    (store.path(run_id) / "run.json").write_text(json.dumps(asdict(info)))


def test_the_writer_check_asks_the_kernel(tmp_path, sleeper):
    store = RunStore(tmp_path / "runs")
    host = socket.gethostname()
    started = process_started(sleeper.pid)
    write_run(store, "live", pid=sleeper.pid, host=host, pid_started=started)
    write_run(store, "recycled", pid=sleeper.pid, host=host, pid_started=started - 1)  # another process had the pid
    write_run(store, "elsewhere", pid=sleeper.pid + 10**6, host=host + "-other", pid_started=1)
    write_run(store, "legacy")  # written before runs recorded their writer: left as it says
    write_run(store, "done", pid=sleeper.pid + 10**6, host=host, status="finished")
    assert {i.run_id: i.status for i in store.list()} == {
        "done": "finished",
        "elsewhere": "running",
        "legacy": "running",
        "live": "running",
        "recycled": "interrupted",
    }
    with pytest.raises(ValueError, match=f"still running \\(pid {sleeper.pid}"):
        store.check_free(store.load("live"))
    sleeper.kill()
    sleeper.wait()
    assert store.load("live").status == "interrupted"
    store.check_free(store.load("live"))  # a dead writer holds nothing


def test_runs_of_one_namespace_or_of_all(tmp_path, monkeypatch):
    monkeypatch.setenv("CRL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COLUMNS", "200")
    made = {}
    for ns in ("alice", "bob", "bob"):
        r = invoke("--namespace", ns, "run", "keyroom/key", "--policy", "random", "-n", "1", "--no-memory", "--json")
        assert r.exit_code == 0, r.output
        made.setdefault(ns, []).append(json.loads(r.stdout)["run_id"])
    alice = json.loads(invoke("--namespace", "alice", "runs", "--json").stdout)
    bob = json.loads(invoke("--namespace", "bob", "runs", "--json").stdout)
    assert [r["run_id"] for r in alice] == made["alice"] and sorted(r["run_id"] for r in bob) == sorted(made["bob"])
    assert json.loads(invoke("runs", "--json").stdout) == []  # the default namespace played nothing
    every = json.loads(invoke("runs", "--all-namespaces", "--json").stdout)
    assert sorted((r["namespace"], r["run_id"]) for r in every) == sorted(
        (ns, rid) for ns, ids in made.items() for rid in ids
    )
    table = invoke("runs", "--all-namespaces").stdout
    assert "namespace" in table and "alice" in table and "every namespace" in table
    title, _, header, *rest = invoke("--namespace", "bob", "runs").stdout.splitlines()
    assert "namespace bob" in title and "namespace" not in header and "run_id" in header
    assert "1 run(s) of other namespaces: --all-namespaces lists them" in " ".join(rest)
