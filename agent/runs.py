"""Runs on disk: `<home>/runs/<run_id>/run.json` (what was asked) and `episodes.jsonl` (the
episode log). A run can be listed, shown and resumed from these two files alone."""

from __future__ import annotations

import json
import os
import re
import secrets
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
        """Create the run folder and write `run.json`."""
        p = self.path(info.run_id)
        p.mkdir(parents=True, exist_ok=False)
        self.save(info)
        return p

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
        """The run's `run.json`, or a clear error naming `crl runs`."""
        p = self.path(run_id) / RUN_FILE
        if not p.exists():
            raise FileNotFoundError(f"no run {run_id!r} under {self.dir} (see `crl runs`)")
        return RunInfo(**json.loads(p.read_text()))

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
