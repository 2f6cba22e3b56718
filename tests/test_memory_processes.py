"""The bank across processes: the embedded lock, two writers on one server, SIGKILL mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from crl.memory.bank import ExperienceBank
from crl.memory.config import MemoryConfig
from crl.memory.storage.embeddings import HashingEmbedding
from crl.memory.storage.episode_log import iter_events
from crl.memory.storage.store import StoreError
from tests.chroma_server import AuthProxy, chroma_server, make_episode, no_default_embedding, write_log  # noqa: F401

REPO = Path(__file__).resolve().parents[1]


def _python(script: str, *args: str, **kw) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO), ANONYMIZED_TELEMETRY="False")
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


OPEN_AND_REPORT = """
    import sys, time, json
    from crl.memory.config import MemoryConfig
    from crl.memory.storage.embeddings import HashingEmbedding
    t0 = time.monotonic()
    from crl.memory.bank import ExperienceBank
    from crl.memory.storage.locks import StoreLockedError
    t = time.monotonic()
    try:
        ExperienceBank(sys.argv[1], None, MemoryConfig(fsync_journal=False), embedder=HashingEmbedding(64))
        print(json.dumps({"opened": True}))
    except StoreLockedError as e:
        print(json.dumps({"refused": str(e), "seconds": time.monotonic() - t}))
"""


def test_second_process_on_an_embedded_store_is_refused_fast(tmp_path):
    memory = tmp_path / "memory"
    bank = ExperienceBank(memory, None, MemoryConfig(fsync_journal=False), embedder=HashingEmbedding(64))
    try:
        out, err = _python(OPEN_AND_REPORT, str(memory)).communicate(timeout=120)
        result = json.loads(out.strip().splitlines()[-1])
        assert "refused" in result, err
        assert result["seconds"] < 2.0
        assert "--memory-url" in result["refused"] and f"pid {os.getpid()}" in result["refused"]
    finally:
        bank.close()
    out, err = _python(OPEN_AND_REPORT, str(memory)).communicate(timeout=120)
    assert json.loads(out.strip().splitlines()[-1]) == {"opened": True}, err


SYNC_ALL = """
    import sys
    from crl.memory.bank import ExperienceBank
    from crl.memory.config import MemoryConfig
    from crl.memory.storage.embeddings import HashingEmbedding
    config = MemoryConfig(url=sys.argv[3], namespace=sys.argv[4], fsync_journal=False)
    with ExperienceBank(sys.argv[1], sys.argv[2], config, embedder=HashingEmbedding(64)) as bank:
        report = bank.sync()
        print(report.episodes_ingested, report.steps_ingested)
"""


def test_two_processes_on_one_server_lose_and_duplicate_nothing(chroma_server, tmp_path):
    runs = tmp_path / "runs"
    for r in range(4):
        write_log(runs, f"r{r}", [make_episode(f"r{r}", i, success=i % 3 == 0, n_steps=3) for i in range(6)])
    args = (str(tmp_path / "memory"), str(runs), chroma_server.url, "twoproc")
    procs = [_python(SYNC_ALL, *args) for _ in range(2)]
    results = [p.communicate(timeout=240) for p in procs]
    for p, (_out, err) in zip(procs, results):
        assert p.returncode == 0, err
    ingested = [tuple(map(int, out.split())) for out, _ in results]
    assert sum(n for n, _ in ingested) == 24 and sum(s for _, s in ingested) == 72
    config = MemoryConfig(url=chroma_server.url, namespace="twoproc", fsync_journal=False)
    with ExperienceBank(tmp_path / "memory", runs, config, embedder=HashingEmbedding(64)) as bank:
        assert len(bank.ls()) == 24 and bank.view.count("step", "keyroom") == 72
        ingests = [e for e in bank.state.entries if e.op == "ingest"]
        assert len(ingests) == len({e.ids[0] for e in ingests}) == 24


KILLABLE_RUN = """
    import sys, time
    from crl.memory.bank import ExperienceBank
    from crl.memory.config import MemoryConfig
    from crl.memory.storage.embeddings import HashingEmbedding
    from crl.memory.storage.episode_log import EpisodeLog
    from tests.chroma_server import make_episode
    memory, runs, run_id = sys.argv[1], sys.argv[2], sys.argv[3]
    bank = ExperienceBank(memory, runs, MemoryConfig(fsync_journal=False), embedder=HashingEmbedding(64))
    bank.sync()
    print("ready", flush=True)
    with EpisodeLog(f"{runs}/{run_id}/episodes.jsonl") as log:
        for i in range(1000):
            ep = make_episode(run_id, i, success=i % 2 == 0, n_steps=5)
            steps, ep.steps = ep.steps, []
            log.start(ep)
            for step in steps:
                ep.steps.append(step)
                log.step(ep.episode_id, step)
                time.sleep(0.005)
            log.end(ep)
            bank.submit(ep)
"""


def test_sigkill_mid_run_loses_no_logged_step(tmp_path):
    memory, runs = tmp_path / "memory", tmp_path / "runs"
    for attempt in range(3):
        proc = _python(KILLABLE_RUN, str(memory), str(runs), f"run{attempt}")
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        time.sleep(0.6 + 0.35 * attempt)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    logged: set[tuple[str, int]] = set()
    for log in runs.glob("*/episodes.jsonl"):
        for ev in iter_events(log):
            if ev["event"] == "step":
                logged.add((ev["episode_id"], ev["index"]))
    assert len(logged) > 10
    with ExperienceBank(memory, runs, MemoryConfig(fsync_journal=False), embedder=HashingEmbedding(64)) as bank:
        bank.sync()
        stored = [(r.episode_id, r.index) for r in bank.ls(kind="step")]
        assert len(stored) == len(set(stored))
        assert set(stored) == logged
        ingests = [e.ids[0] for e in bank.state.entries if e.op == "ingest" and e.payload["finished"]]
        assert len(ingests) == len(set(ingests))


def test_headers_from_the_environment_get_through_an_auth_proxy(monkeypatch, chroma_server, tmp_path):
    proxy = AuthProxy(chroma_server.url, token="s3cret")
    try:
        config = MemoryConfig(url=proxy.url, namespace="hdr", fsync_journal=False)
        with pytest.raises(StoreError, match="cannot reach the Chroma server"):
            ExperienceBank(tmp_path / "m", None, config, embedder=HashingEmbedding(64))
        monkeypatch.setenv("CRL_MEMORY_TOKEN", "s3cret")
        monkeypatch.setenv("CRL_MEMORY_HEADERS", '{"X-Team": "memory"}')
        assert config.resolved_headers() == {"X-Team": "memory", "Authorization": "Bearer s3cret"}
        with ExperienceBank(tmp_path / "m", None, config, embedder=HashingEmbedding(64)) as bank:
            bank.ingest_episode(make_episode("h", 0, success=True))
            assert len(bank.ls()) == 1
        assert proxy.seen[-1] == "Bearer s3cret"
    finally:
        proxy.stop()


def test_bad_header_variable_is_explained(monkeypatch):
    monkeypatch.setenv("CRL_MEMORY_HEADERS", "[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        MemoryConfig(url="http://127.0.0.1:1").resolved_headers()
    monkeypatch.setenv("CRL_MEMORY_HEADERS", "{nope")
    with pytest.raises(ValueError, match="not valid JSON"):
        MemoryConfig(url="http://127.0.0.1:1").resolved_headers()
