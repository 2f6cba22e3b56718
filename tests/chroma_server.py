"""Fixtures for the memory tests: a real Chroma server, banks in either mode, and episodes.

`chroma_server` starts `chroma run --path TMP --port FREE_PORT --host 127.0.0.1` once per
session, waits for its heartbeat and stops it at the end. `open_bank` opens an
`ExperienceBank` with the hashing embedding in the mode a test is parametrised with; every
server-mode bank gets its own collection namespace, so tests sharing the server never see
each other's records.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from crl.memory.bank import ExperienceBank
from crl.memory.config import MemoryConfig
from crl.memory.storage.embeddings import HashingEmbedding
from crl.memory.storage.episode_log import EpisodeLog
from crl.memory.trajectory import Episode, Step

ROOMS = ("hall", "kitchen", "cellar", "attic", "library", "garden", "tower", "vault")


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ChromaServer:
    """A `chroma run` subprocess on 127.0.0.1."""

    def __init__(self, path: Path, port: int | None = None):
        self.path = path
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log = path.parent / f"chroma-{self.port}.log"

    def start(self, timeout_s: float = 60.0) -> "ChromaServer":
        chroma = shutil.which("chroma") or str(Path(sys.executable).parent / "chroma")
        env = dict(os.environ, ANONYMIZED_TELEMETRY="False")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [chroma, "run", "--path", str(self.path), "--port", str(self.port), "--host", "127.0.0.1"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chroma server exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/v2/heartbeat", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"chroma server did not answer within {timeout_s}s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class AuthProxy:
    """A reverse proxy in front of a Chroma server that answers 401 without the right bearer token,
    as an authenticating proxy would; `seen` collects the Authorization headers it got."""

    def __init__(self, upstream: str, token: str):
        import http.server
        import threading
        import urllib.error
        import urllib.request

        proxy = self
        self.seen: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _forward(self):
                auth = self.headers.get("Authorization", "")
                proxy.seen.append(auth)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if auth != f"Bearer {token}":
                    status, headers, data = 401, {"Content-Type": "application/json"}, b'{"error":"unauthorized"}'
                else:
                    req = urllib.request.Request(upstream + self.path, data=body or None, method=self.command)
                    for k, v in self.headers.items():
                        if k.lower() not in ("host", "authorization", "content-length", "connection"):
                            req.add_header(k, v)
                    try:
                        with urllib.request.urlopen(req, timeout=30) as r:
                            status, headers, data = r.status, dict(r.headers), r.read()
                    except urllib.error.HTTPError as e:
                        status, headers, data = e.code, dict(e.headers), e.read()
                self.send_response(status)
                for k, v in headers.items():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="session")
def chroma_server():
    """One Chroma server for the whole session."""
    root = Path(tempfile.mkdtemp(prefix="crl-chroma-"))
    server = ChromaServer(root / "data").start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(autouse=True)
def no_default_embedding(monkeypatch):
    """Fail any test in which Chroma's own default embedding function (a download) is reached."""
    from chromadb.api.types import DefaultEmbeddingFunction
    from chromadb.utils.embedding_functions.onnx_mini_lm_l6_v2 import ONNXMiniLM_L6_V2

    def refuse(self, input):
        raise AssertionError("Chroma's default embedding function was reached")

    monkeypatch.setattr(DefaultEmbeddingFunction, "__call__", refuse)
    monkeypatch.setattr(ONNXMiniLM_L6_V2, "__call__", refuse)


BankFactory = Callable[..., ExperienceBank]


@pytest.fixture(params=["embedded", "server"])
def mode(request) -> str:
    """Run the test once against an embedded store and once against the Chroma server."""
    return request.param


@pytest.fixture
def open_bank(request, mode, tmp_path) -> BankFactory:
    """Open banks in the test's mode; all are closed at the end of the test."""
    server = request.getfixturevalue("chroma_server") if mode == "server" else None
    namespace = "t" + uuid.uuid4().hex[:10]
    opened: list[ExperienceBank] = []

    def factory(
        memory_dir: Path | None = None, runs_dir: Path | None = None, embedder=None, **fields
    ) -> ExperienceBank:
        fields.setdefault("namespace", namespace)
        fields.setdefault("fsync_journal", False)
        if server is not None:
            fields.setdefault("url", server.url)
        bank = ExperienceBank(
            memory_dir or tmp_path / "memory",
            runs_dir if runs_dir is not None else tmp_path / "runs",
            MemoryConfig(**fields),
            embedder=embedder or HashingEmbedding(64),
            actor="test",
        )
        opened.append(bank)
        return bank

    factory.server = server  # type: ignore[attr-defined]
    factory.namespace = namespace  # type: ignore[attr-defined]
    yield factory
    for bank in opened:
        bank.close()


def make_episode(
    run_id: str,
    i: int,
    success: bool,
    n_steps: int = 4,
    task: str = "keyroom/key",
    finished: bool = True,
    words: str | None = None,
    goal: str | None = None,
) -> Episode:
    """A small keyroom-like episode; `words` makes its observations unlike any other's."""
    ep = Episode(
        episode_id=f"{run_id}-{i:04d}",
        run_id=run_id,
        task=task,
        seed=i,
        goal=goal or f"Take the key in room {i % 3}.",
        model="scripted",
    )
    for t in range(n_steps):
        last = finished and t == n_steps - 1
        obs = (
            words or f"You are in the {ROOMS[(i + t) % len(ROOMS)]}. Exits lead {ROOMS[(i + 2 * t + 1) % len(ROOMS)]}."
        )
        ep.steps.append(
            Step(
                index=t,
                observation=f"{obs} (step {t})" if words is None else obs,
                action=["go north", "go south", "take key", "look"][t % 4],
                reward=1.0 if success and last else 0.0,
                done=last,
                info={"subgoals": {"key": bool(success and last), "door": False, "chest": False}},
                time=1_700_000_000.0 + i * 100 + t,
            )
        )
    ep.started_at = 1_700_000_000.0 + i * 100
    if finished:
        ep.status = "done" if success else "truncated"
        ep.success = success
        ep.total_return = 1.0 if success else 0.0
        ep.subgoals = {"key": success, "door": False, "chest": False}
        ep.ended_at = ep.started_at + n_steps
    return ep


def write_log(runs_dir: Path, run_id: str, episodes: list[Episode]) -> Path:
    """Write episodes to `runs_dir/run_id/episodes.jsonl` as the runner does (start, steps, end)."""
    path = runs_dir / run_id / "episodes.jsonl"
    with EpisodeLog(path) as log:
        for ep in episodes:
            log.start(ep)
            for step in ep.steps:
                log.step(ep.episode_id, step)
            if ep.finished:
                log.end(ep)
    return path
