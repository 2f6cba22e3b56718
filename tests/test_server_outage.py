"""The Chroma server dies mid-run and comes back: the run goes on logging, says so in one warning
line (no traceback), reconnects with backoff and stores the backlog; nothing is lost.

Real processes: a `chroma run` server that the test stops and restarts on the same port and
data folder, and a `crl run` that retrieves from memory, credits what it used and stores every
episode on that server.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crl.agent.llm.scripted import ScriptedModel
from crl.memory.bank import ExperienceBank
from crl.memory.config import MemoryConfig
from crl.memory.storage.embeddings import HashingEmbedding
from crl.memory.storage.episode_log import read_episodes
from crl.memory.storage.outage import Outage, ServerUnavailable, unreachable
from tests.chroma_server import ChromaServer, make_episode, no_default_embedding  # noqa: F401
from tests.openai_test_server import serve_chat_model


def slow_look(messages):
    time.sleep(0.03)
    return "Thought: let me see.\nAction: look"


def crl_run(home: Path, model_url: str, memory_url: str, *args: str) -> subprocess.Popen:
    """`crl run` with memory in its prompts on the server; its output goes to files beside the home
    (a pipe nobody reads while the test waits could fill and stall it)."""
    env = dict(os.environ, CRL_HOME=str(home), OPENAI_API_KEY="not-needed", CRL_MEMORY__RECONNECT_MAX_S="2")
    cmd = [sys.executable, "-m", "crl", "run", "keyroom/key", "--backend", "openai", "--base-url", model_url]
    cmd += ["--model", "scripted", "--policy", "llm", "--memory", "cases", "--memory-url", memory_url, *args]
    home.parent.mkdir(parents=True, exist_ok=True)
    out = open(home.parent / "out.txt", "w")
    err = open(home.parent / "err.txt", "w")
    return subprocess.Popen(cmd, env=env, stdout=out, stderr=err, text=True)


def output(home: Path) -> tuple[str, str]:
    return (home.parent / "out.txt").read_text(), (home.parent / "err.txt").read_text()


def logged(home: Path) -> dict[str, int]:
    """Episode id -> logged steps, over every run log of the home."""
    out = {}
    for log in (home / "runs").glob("*/episodes.jsonl"):
        for ep in read_episodes(log):
            out[ep.episode_id] = len(ep.steps)
    return out


def finished(home: Path) -> int:
    return sum(1 for log in (home / "runs").glob("*/episodes.jsonl") for e in read_episodes(log) if e.finished)


@pytest.mark.slow
def test_server_stopped_and_restarted_mid_run_loses_nothing(tmp_path):
    home = tmp_path / ".crl"
    server = ChromaServer(tmp_path / "chroma").start()
    model_server, model_url = serve_chat_model(ScriptedModel(slow_look))
    try:
        proc = crl_run(home, model_url, server.url, "-n", "10", "-k", "1", "--max-steps", "6", "--json")
        deadline = time.monotonic() + 240
        while finished(home) < 3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert finished(home) >= 3, output(home)[1][-3000:]
        server.stop()  # mid-run: episodes keep finishing while it is gone
        down_at = finished(home)
        while finished(home) < down_at + 3 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        server.start()
        proc.wait(timeout=300)
        out, errs = output(home)
    finally:
        model_server.stop()
    try:
        assert proc.returncode == 0, errs[-3000:]
        assert "Traceback" not in errs and "httpx" not in errs
        warnings = [line for line in errs.splitlines() if "unreachable" in line]
        assert len(warnings) == 1, errs[-3000:]
        assert "is back after" in errs
        report = json.loads(out[out.index("{") :])
        assert report["episodes"] == 10
        episodes = logged(home)
        assert len(episodes) == 10
        config = MemoryConfig(url=server.url, fsync_journal=False)
        with ExperienceBank(home / "memory", home / "runs", config) as bank:
            stored = {r.episode_id: r.length for r in bank.ls()}
            assert stored == episodes  # every episode, every step, on the server
            steps = len(bank.ls(kind="step"))
            credited = {r.id: (r.use_count, r.value) for k in ("episode", "step") for r in bank.ls(kind=k)}
            assert sum(c for c, _ in credited.values()) > 0
            credits = [e for e in bank.state.entries if e.op == "credit"]
            assert sum(len(e.ids) for e in credits) == sum(c for c, _ in credited.values())  # no credit lost
            bank.rebuild()
            assert {r.episode_id: r.length for r in bank.ls()} == episodes and len(bank.ls(kind="step")) == steps
            again = {r.id: (r.use_count, r.value) for k in ("episode", "step") for r in bank.ls(kind=k)}
            assert again == credited
    finally:
        server.stop()


def test_an_ingest_while_the_server_is_down_waits_and_is_stored_when_it_returns(tmp_path):
    server = ChromaServer(tmp_path / "chroma").start()
    lines: list[str] = []
    config = MemoryConfig(url=server.url, namespace="outage", fsync_journal=False, reconnect_base_s=0.05)
    bank = ExperienceBank(tmp_path / "memory", tmp_path / "runs", config, embedder=HashingEmbedding(64))
    bank.outage.say = lines.append
    try:
        first = bank.ingest_episode(make_episode("r", 0, True)).record_id
        server.stop()
        deferred = [bank.ingest_episode(make_episode("r", i, i % 2 == 0)) for i in (1, 2, 3)]
        assert all(r.skipped and "deferred" in r.skipped for r in deferred) and bank.backlog == 3
        bank.credit([first], success=True, target=1.0)  # journalled although the view cannot be written
        assert not bank.available()
        assert len(lines) == 1 and "unreachable" in lines[0] and "Traceback" not in lines[0]
        server.start()
        assert bank.outage.wait(10) and bank.available()
        assert bank.backlog == 0 and "back after" in lines[-1]
        bank.ingest_episode(make_episode("r", 4, True))  # a write catches the view up on the journalled credit
        assert len(bank.ls()) == 5
        assert bank.get(first).use_count == 1
    finally:
        bank.close()
        server.stop()


def test_close_leaves_what_a_dead_server_missed_to_the_next_sync(tmp_path):
    server = ChromaServer(tmp_path / "chroma").start()
    lines: list[str] = []
    runs = tmp_path / "runs"
    config = MemoryConfig(url=server.url, namespace="gone", fsync_journal=False, reconnect_wait_s=0.3)
    from tests.chroma_server import write_log

    episodes = [make_episode("r1", i, True) for i in range(3)]
    write_log(runs, "r1", episodes)
    bank = ExperienceBank(tmp_path / "memory", runs, config, embedder=HashingEmbedding(64))
    bank.outage.say = lines.append
    try:
        bank.ingest_episode(episodes[0])
        server.stop()
        for ep in episodes[1:]:
            bank.ingest_episode(ep)
        bank.close()  # retries for reconnect_wait_s, then says what waits: one line each
        assert len(lines) == 2 and "crl memory sync" in lines[1] and "2 episode(s)" in lines[1]
        server.start()
        with ExperienceBank(tmp_path / "memory", runs, config, embedder=HashingEmbedding(64)) as again:
            assert again.sync().episodes_ingested == 2 and len(again.ls()) == 3
    finally:
        server.stop()


def test_outage_backs_off_and_warns_once():
    now = [0.0]
    calls = []

    def heartbeat():
        calls.append(now[0])
        raise ConnectionError("refused")

    lines: list[str] = []
    outage = Outage(
        heartbeat, "http://user:secret@127.0.0.1:9", base_s=1, max_s=4, say=lines.append, clock=lambda: now[0]
    )
    outage.failed(ConnectionError("refused"))
    for t in range(0, 20):
        now[0] = float(t)
        outage.probe()
    assert calls == [1.0, 3.0, 7.0, 11.0, 15.0, 19.0]  # 1, 2, 4, then at most 4 s apart
    assert len(lines) == 1 and "secret" not in lines[0]
    assert unreachable(ServerUnavailable("x")) and not unreachable(ValueError("bad request"))
