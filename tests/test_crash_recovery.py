"""`crl run` killed with SIGKILL mid-episode, twice: nothing logged is lost, nothing
is stored twice, and `--resume` finishes the run (real processes, real bank)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crl.agent.app import open_bank
from crl.agent.config import load_settings
from crl.agent.llm.scripted import ScriptedModel
from crl.memory.storage.episode_log import iter_events
from tests.openai_test_server import serve_chat_model


def slow_look(messages):
    time.sleep(0.05)
    return "Thought: let me see.\nAction: look"


def crl(home: Path, url: str, *args: str) -> subprocess.Popen:
    env = dict(os.environ, CRL_HOME=str(home), OPENAI_API_KEY="not-needed")
    cmd = [
        sys.executable,
        "-m",
        "crl",
        "run",
        "keyroom/compound",
        "--backend",
        "openai",
        "--base-url",
        url,
        "--model",
        "scripted",
        "--policy",
        "llm",
        "--memory",
        "off",
        *args,
    ]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def logged_steps(home: Path) -> set[tuple[str, int]]:
    steps = set()
    for log in (home / "runs").glob("*/episodes.jsonl"):
        for ev in iter_events(log):
            if ev["event"] == "step":
                steps.add((ev["episode_id"], ev["index"]))
    return steps


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_stores_every_step_once(tmp_path):
    home = tmp_path / ".crl"
    server, url = serve_chat_model(ScriptedModel(slow_look))
    try:
        run_id = None
        for _attempt in range(2):  # killed once in the first run and once in its resumption
            args = ["--resume", run_id] if run_id else ["-n", "4", "-k", "2", "--max-steps", "12"]
            proc = crl(home, url, *args)
            before = len(logged_steps(home))
            deadline = time.monotonic() + 90
            while len(logged_steps(home)) < before + 5 and time.monotonic() < deadline:
                time.sleep(0.1)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            assert len(logged_steps(home)) >= before + 5, proc.stderr.read()
            run_id = run_id or next((home / "runs").iterdir()).name
        killed_with = logged_steps(home)
        final = crl(home, url, "--resume", run_id, "--json")
        out, errs = final.communicate(timeout=300)
        assert final.returncode == 0, errs
        report = json.loads(out[out.index("{") :])
        assert report["episodes"] == 4
    finally:
        server.stop()
    steps = logged_steps(home)
    assert killed_with <= steps
    assert len(steps) == 4 * 12  # every episode ran to its step limit, each step once
    with open_bank(load_settings({"home": str(home)})) as bank:
        stored = [(r.episode_id, r.index) for r in bank.ls(kind="step")]
    assert len(stored) == len(set(stored)) and set(stored) == steps
