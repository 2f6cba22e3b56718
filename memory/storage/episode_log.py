"""The per-run episode log: append-only JSONL, flushed every step, torn tails repaired.

Each line is one event: `{"event": "start", ...episode header}`, `{"event": "step",
"episode_id": ..., ...step}` or `{"event": "end", "episode_id": ..., ...outcome}`. Episodes of
a parallel run interleave; `read_episodes` puts them back together.

Logs are read as bytes, line by line, so one bad line never makes the rest unreadable:
- a process killed mid-write leaves at most one torn last line (possibly cut inside a
  multi-byte character); readers skip it and `EpisodeLog` cuts it off when it reopens;
- a bad line anywhere else (not UTF-8, not JSON, not an event) is skipped with a warning
  naming the file and line; the writer moves it to the sidecar `<log>.bad` when it reopens
  the log, so later readers no longer meet it.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crl.memory.trajectory import LOG_SCHEMA_VERSION, Episode, Step

logger = logging.getLogger(__name__)

EVENTS = ("start", "step", "end")
BAD_SUFFIX = ".bad"
_reported: set[tuple[str, int, int]] = set()


@dataclass
class LogRepair:
    """What reopening a log repaired: bytes of a torn tail cut off, bad lines moved to `sidecar`."""

    cut_bytes: int = 0
    quarantined: list[int] = field(default_factory=list)
    sidecar: Path | None = None

    def describe(self, path: Path) -> str:
        parts = []
        if self.cut_bytes:
            parts.append(f"cut a torn last line ({self.cut_bytes} bytes)")
        if self.quarantined:
            lines = ", ".join(str(n) for n in self.quarantined[:10])
            parts.append(f"moved bad line(s) {lines} to {self.sidecar}")
        return f"{path}: " + "; ".join(parts)


def parse_event(raw: bytes) -> dict[str, Any]:
    """One log line as an event.

    Raises:
        ValueError: the line is not UTF-8, not JSON, or not an event object.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 ({e.reason} at byte {e.start})") from None
    try:
        event = json.loads(text)
    except ValueError as e:
        raise ValueError(f"not JSON ({e})") from None
    if not isinstance(event, dict) or event.get("event") not in EVENTS:
        raise ValueError("not a start, step or end event")
    if not isinstance(event.get("episode_id"), str):
        raise ValueError("an event without an episode_id")
    return event


def report_bad_line(path: Path, line: int, reason: str, problems: list[str] | None) -> None:
    """Warn (once per process for the same file, line and size) that a log line was skipped."""
    message = f"{path}:{line}: skipped a corrupt episode-log line ({reason})"
    if problems is not None:
        problems.append(message)
    try:
        size = path.stat().st_size
    except OSError:
        size = -1
    key = (str(path), line, size)
    if key not in _reported:
        _reported.add(key)
        logger.warning(message)


def _split(data: bytes) -> tuple[list[bytes], bytes]:
    """Complete lines (without their newline) and the unterminated rest."""
    lines = data.split(b"\n")
    return lines[:-1], lines[-1]


def numbered_events(path: str | Path, problems: list[str] | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, event) of a log in order, skipping a torn last line and bad lines (with a
    warning naming file and line, also appended to `problems`); never modifies the file."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    lines, rest = _split(data)
    if rest.strip():
        lines.append(rest)
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            event = parse_event(raw)
        except ValueError as e:
            if i < len(lines) - 1:
                report_bad_line(path, i + 1, str(e), problems)
            continue  # the last line: a torn tail the writer cuts off on reopening
        yield i + 1, event


def iter_events(path: str | Path, problems: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """Events of a log in order, skipping a torn last line and bad lines (see `numbered_events`)."""
    for _, event in numbered_events(path, problems):
        yield event


def repair_log(path: Path) -> LogRepair:
    """Make `path` a clean log: cut a torn last line, move bad lines to `<log>.bad`.

    Only the log's writer may call it (a run holds its log): it may rewrite the file.
    """
    repair = LogRepair()
    if not path.exists() or path.stat().st_size == 0:
        return repair
    data = path.read_bytes()
    lines, rest = _split(data)
    tail = b""
    if rest:
        try:
            parse_event(rest)
            tail = rest + b"\n"  # a whole event that only lost its newline
        except ValueError:
            repair.cut_bytes = len(rest)
    elif lines:
        try:
            parse_event(lines[-1])
        except ValueError:
            repair.cut_bytes = len(lines[-1]) + 1  # an unparseable last line: torn as well
            lines = lines[:-1]
    good: list[bytes] = []
    bad: list[bytes] = []
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            parse_event(raw)
            good.append(raw)
        except ValueError as e:
            bad.append(raw)
            repair.quarantined.append(i + 1)
            report_bad_line(path, i + 1, str(e), None)
    if not bad:
        if repair.cut_bytes:
            with open(path, "rb+") as f:
                f.truncate(len(data) - repair.cut_bytes)
                f.flush()
                os.fsync(f.fileno())
        elif tail:
            with open(path, "ab") as f:
                f.write(b"\n")
                f.flush()
                os.fsync(f.fileno())
        return repair
    repair.sidecar = path.with_name(path.name + BAD_SUFFIX)
    with open(repair.sidecar, "ab") as f:
        f.write(b"".join(raw + b"\n" for raw in bad))
        f.flush()
        os.fsync(f.fileno())
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(b"".join(raw + b"\n" for raw in good) + tail)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return repair


def repair_torn_tail(path: Path) -> int:
    """Repair `path` (see `repair_log`); return the bytes of a torn tail cut off."""
    return repair_log(Path(path)).cut_bytes


class EpisodeLog:
    """Appends events to one run's JSONL log. Opening it repairs the log first (`repair_log`);
    what was repaired is in `repair` (and logged as a warning)."""

    def __init__(self, path: str | Path, fsync: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repair = repair_log(self.path)
        if self.repair.cut_bytes or self.repair.quarantined:
            logger.warning("repaired the episode log %s", self.repair.describe(self.path))
        self._f = open(self.path, "a", encoding="utf-8")
        self._fsync = fsync

    @property
    def repaired_bytes(self) -> int:
        """Bytes of a torn tail cut off when the log was opened."""
        return self.repair.cut_bytes

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


def read_episodes(path: str | Path, problems: list[str] | None = None) -> list[Episode]:
    """Rebuild the episodes of a log, in the order they started; unfinished ones stay 'running'.

    Bad lines, and events whose fields do not fit an episode or step, are skipped with a
    warning naming the file and line (also appended to `problems`).
    """
    path = Path(path)
    episodes: dict[str, Episode] = {}
    for n, ev in numbered_events(path, problems):
        kind = ev.pop("event")
        ev.pop("v", None)
        try:
            if kind == "start":
                episodes[ev["episode_id"]] = Episode.from_dict(ev)
            elif kind == "step":
                ep = episodes.get(ev.pop("episode_id"))
                if ep is not None:
                    ep.steps.append(Step.from_dict(ev))
            else:
                ep = episodes.get(ev.pop("episode_id"))
                if ep is not None:
                    ev.pop("n_steps", None)
                    for k, v in ev.items():
                        if k in Episode.__dataclass_fields__:
                            setattr(ep, k, v)
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            report_bad_line(path, n, f"a {kind} event that does not fit ({type(e).__name__}: {e})", problems)
    return list(episodes.values())
