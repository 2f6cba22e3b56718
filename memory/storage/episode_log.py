"""The per-run episode log: append-only JSONL, flushed every step, torn tails repaired.

Each line is one event: `{"event": "start", ...episode header}`, `{"event": "step",
"episode_id": ..., ...step}` or `{"event": "end", "episode_id": ..., ...outcome}`. Episodes of
a parallel run interleave; `read_episodes` puts them back together. A process killed
mid-write leaves at most one torn last line, which `EpisodeLog` cuts off when it reopens.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from crl.memory.trajectory import LOG_SCHEMA_VERSION, Episode, Step


def repair_torn_tail(path: Path) -> int:
    """Cut a partial or unparseable last line off `path`; return the bytes removed."""
    if not path.exists():
        return 0
    size = path.stat().st_size
    if size == 0:
        return 0
    with open(path, "rb+") as f:
        data = f.read()
        keep = len(data)
        if not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
        else:
            last_start = data.rfind(b"\n", 0, len(data) - 1) + 1
            try:
                json.loads(data[last_start:])
            except ValueError:
                keep = last_start
        if keep < len(data):
            f.truncate(keep)
            f.flush()
            os.fsync(f.fileno())
    return size - keep


class EpisodeLog:
    """Appends events to one run's JSONL log. Opening it repairs a torn tail first."""

    def __init__(self, path: str | Path, fsync: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repaired_bytes = repair_torn_tail(self.path)
        self._f = open(self.path, "a", encoding="utf-8")
        self._fsync = fsync

    def _write(self, event: dict[str, Any]) -> None:
        self._f.write(json.dumps(event, ensure_ascii=False, allow_nan=False) + "\n")
        self._f.flush()
        if self._fsync:
            os.fsync(self._f.fileno())

    def start(self, episode: Episode) -> None:
        """Log that `episode` began."""
        self._write({"event": "start", "v": LOG_SCHEMA_VERSION, **episode.header()})

    def step(self, episode_id: str, step: Step) -> None:
        """Log one step of episode `episode_id`."""
        self._write({"event": "step", "episode_id": episode_id, **step.to_dict()})

    def end(self, episode: Episode) -> None:
        """Log how `episode` ended."""
        self._write({"event": "end", "episode_id": episode.episode_id, **episode.outcome()})

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self) -> "EpisodeLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def iter_events(path: str | Path) -> Iterator[dict[str, Any]]:
    """Events of a log in order, skipping a torn last line (without modifying the file)."""
    path = Path(path)
    if not path.exists():
        return
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    for i, line in enumerate(lines):
        try:
            yield json.loads(line)
        except ValueError:
            if i == len(lines) - 1:
                return
            raise ValueError(f"{path}:{i + 1}: corrupt log line (not the last one)") from None


def read_episodes(path: str | Path) -> list[Episode]:
    """Rebuild the episodes of a log, in the order they started; unfinished ones stay 'running'."""
    episodes: dict[str, Episode] = {}
    for ev in iter_events(path):
        kind = ev.pop("event", None)
        ev.pop("v", None)
        if kind == "start":
            episodes[ev["episode_id"]] = Episode.from_dict(ev)
        elif kind == "step":
            ep = episodes.get(ev.pop("episode_id"))
            if ep is not None:
                ep.steps.append(Step.from_dict(ev))
        elif kind == "end":
            ep = episodes.get(ev.pop("episode_id"))
            if ep is not None:
                ev.pop("n_steps", None)
                for k, v in ev.items():
                    if k in Episode.__dataclass_fields__:
                        setattr(ep, k, v)
    return list(episodes.values())
