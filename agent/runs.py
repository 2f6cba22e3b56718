"""Runs on disk: `<home>/runs/<run_id>/run.json` (what was asked) and `episodes.jsonl` (the
episode log). A run can be listed, shown and resumed from these two files alone.

A run records its writer (pid, host, and the process's start time, so a recycled pid is not
mistaken for it). A run whose `run.json` still says "running" but whose writer is gone from this
host (killed with SIGKILL, crashed, the machine rebooted) is read back as "interrupted":
`--resume` continues it. A run written on another host cannot be checked from here and stays
"running"; its heartbeat (`RunStore.last_active`: when its log or `run.json` last changed) says
how long ago it last did anything.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from crl.memory.storage.episode_log import read_episodes
from crl.memory.trajectory import Episode

if TYPE_CHECKING:
    from crl.agent.config import Settings

RUN_FILE = "run.json"
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
LOG_FILE = "episodes.jsonl"


@dataclass
class RunInfo:
    """What a run was asked to do; written once at the start, updated at the end.

    `prompt_templates` is the hash of the agent's prompt templates the run used
    (`prompts.render.templates_hash`; None for runs logged before it was recorded), so prompt
    replay can tell when they changed since. `scoring` says how actions were scored when the
    posterior policy scored them (`"local"` log-likelihoods, or the served method and counts);
    `synthesis` what automatic synthesis made during the run and the replay steps it cost;
    `tools` the tools a tool-using run offered (`Toolbox.report`: mode, definitions, sources).
    """

    run_id: str
    kind: str
    task: str
    seeds: list[int]
    model: str
    adapter: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    status: str = "running"
    error: str | None = None
    prompt_templates: str | None = None
    scoring: dict[str, Any] | None = None
    synthesis: dict[str, Any] | None = None
    tools: dict[str, Any] | None = None
    pid: int | None = None
    host: str | None = None
    pid_started: int | None = None

    @property
    def namespace(self) -> str | None:
        """The memory namespace the run learns into (None: a run logged before namespaces)."""
        ns = ((self.settings or {}).get("memory") or {}).get("namespace")
        return ns if isinstance(ns, str) and ns else None


def process_started(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot, from /proc), or None where unknown.

    Returns None for a zombie too: a killed process its parent has not reaped is gone.
    """
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[-1].split()
    if len(fields) < 20 or fields[0] in ("Z", "X") or not fields[19].isdigit():
        return None
    return int(fields[19])


def writer_alive(pid: int, started: int | None) -> bool:
    """Whether process `pid` (which started at `started`, when known) still runs on this host."""
    if pid <= 0:
        return False
    if Path("/proc/self/stat").exists():
        now = process_started(pid)
        return now is not None and (not isinstance(started, int) or now == started)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def writer_gone(info: RunInfo) -> bool:
    """Whether a run that says it is running was written by a process of this host that is gone."""
    if info.status != "running" or not isinstance(info.pid, int) or info.host != socket.gethostname():
        return False
    if info.pid == os.getpid() and info.pid_started == process_started(os.getpid()):
        return False
    return not writer_alive(info.pid, info.pid_started)


def writer_live_elsewhere(info: RunInfo) -> bool:
    """Whether another live process of this host is writing the run now."""
    if info.status != "running" or not isinstance(info.pid, int) or info.host != socket.gethostname():
        return False
    if info.pid == os.getpid():
        return False
    return writer_alive(info.pid, info.pid_started)


@dataclass
class RunSummary:
    """Outcome figures of a run computed from its log."""

    episodes: int
    finished: int
    successes: int
    steps: int
    invalid_steps: int
    errored: int = 0

    @property
    def success_rate(self) -> float:
        return self.successes / self.finished if self.finished else 0.0


def new_run_id() -> str:
    """A sortable, unique run id such as `20261129-221530-3fa2`."""
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(2)


class RunStore:
    """The runs under one data directory."""

    def __init__(self, runs_dir: str | Path):
        self.dir = Path(runs_dir)

    def path(self, run_id: str) -> Path:
        """The run's folder; a ValueError for an id that is not one folder name inside this store."""
        if not RUN_ID.fullmatch(run_id or "") or run_id in (".", ".."):
            raise ValueError(
                f"bad run id {run_id!r}: a run id is one name such as 20261129-221530-3fa2 (see `crl runs`)"
            )
        return self.dir / run_id

    def log_path(self, run_id: str) -> Path:
        return self.path(run_id) / LOG_FILE

    def create(self, info: RunInfo) -> Path:
        """Create the run folder and write `run.json`, naming this process as its writer."""
        p = self.path(info.run_id)
        p.mkdir(parents=True, exist_ok=False)
        self.claim(info)
        return p

    def check_free(self, info: RunInfo) -> None:
        """Refuse to write a run that another live process of this host is writing.

        Raises:
            ValueError: that process still runs (naming its pid).
        """
        if writer_live_elsewhere(info):
            raise ValueError(
                f"run {info.run_id} is still running (pid {info.pid} on {info.host}); "
                "wait for it to end, or stop it, before resuming it"
            )

    def claim(self, info: RunInfo) -> None:
        """Record this process as the run's writer (pid, host, start time) and save `run.json`.

        Raises:
            ValueError: another live process of this host is writing the run.
        """
        self.check_free(info)
        info.pid, info.host, info.pid_started = os.getpid(), socket.gethostname(), process_started(os.getpid())
        self.save(info)

    def last_active(self, run_id: str) -> float | None:
        """The run's heartbeat: when its episode log (flushed every step) or `run.json` last changed."""
        times = []
        for name in (LOG_FILE, RUN_FILE):
            try:
                times.append((self.path(run_id) / name).stat().st_mtime)
            except OSError:
                continue
        return max(times) if times else None

    def save(self, info: RunInfo) -> None:
        """Write `run.json` atomically."""
        p = self.path(info.run_id) / RUN_FILE
        tmp = p.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(asdict(info), indent=2, default=str))
            os.replace(tmp, p)
        except OSError:  # a full disk: keep the last whole run.json, leave no half-written copy
            tmp.unlink(missing_ok=True)
            raise

    def load(self, run_id: str) -> RunInfo:
        """The run's `run.json` ("interrupted" when it says running but its writer is gone), or a
        clear error naming `crl runs`."""
        p = self.path(run_id) / RUN_FILE
        if not p.exists():
            raise FileNotFoundError(f"no run {run_id!r} under {self.dir} (see `crl runs`)")
        info = RunInfo(**json.loads(p.read_text()))
        if writer_gone(info):
            info.status = "interrupted"
        return info

    def episodes(self, run_id: str) -> list[Episode]:
        """Every episode in the run's log, finished or not."""
        return read_episodes(self.log_path(run_id))

    def list(self) -> list[RunInfo]:
        """All runs, oldest first."""
        if not self.dir.exists():
            return []
        infos = []
        for p in sorted(self.dir.iterdir()):
            if (p / RUN_FILE).exists():
                try:
                    infos.append(self.load(p.name))
                except (ValueError, TypeError):
                    continue
        return infos


def find_run(stores: list[RunStore], run_id: str) -> RunStore:
    """The store among `stores` that holds `run_id`."""
    for store in stores:
        if (store.path(run_id) / RUN_FILE).exists():
            return store
    raise FileNotFoundError(f"no run {run_id!r} under {', '.join(str(s.dir) for s in stores)} (see `crl runs`)")


def summarise(episodes: list[Episode]) -> RunSummary:
    """Counts over `episodes`: episodes that ended in an environment error are counted apart
    (they are retried once, and are neither successes nor failures)."""
    finished = [e for e in episodes if e.finished and e.status != "error"]
    return RunSummary(
        errored=sum(1 for e in episodes if e.status == "error"),
        episodes=len(episodes),
        finished=len(finished),
        successes=sum(1 for e in finished if e.success),
        steps=sum(len(e.steps) for e in episodes),
        invalid_steps=sum(e.invalid_steps for e in episodes),
    )


def run_stores(settings: "Settings") -> list[RunStore]:
    """Where runs live: training runs (whose experience goes to memory) and evaluations
    (kept apart, so held-out seeds never leak into memory)."""
    return [RunStore(settings.runs_dir), RunStore(settings.evals_dir)]
