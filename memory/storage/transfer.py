"""Export and import of records as JSONL, one record per line, validated before anything is written.

An export line is a record's `model_dump` (with `kind` and `schema_version`). An import is
read whole and checked line by line: over-long lines, bad JSON, NaN or Infinity, strings
longer than `max_field_chars`, wrong types, unknown fields, unknown or newer schema versions
and duplicate ids are all reported with their line numbers, and `ImportValidationError` is
raised before the bank changes. Records of an older schema version go through `MIGRATIONS`.

An import is untrusted input, so each record is also checked for consistency
(`consistency_problems`): names the bank can store, an outcome that agrees with `success` and
`status`, a length, return and invalid-step count that agree with the trajectory, a task of
the record's family, values within [0, 1], steps that agree with their episode.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from crl.memory.errors import BankError
from crl.memory.records import (
    KINDS,
    RULE_SCOPE_ALL,
    SCHEMA_VERSION,
    AnyRecord,
    EpisodeRecord,
    RuleRecord,
    StepRecord,
    family_problem,
    id_problem,
    record_from_dict,
)

MAX_REPORTED_ERRORS = 20
STATUSES = ("running", "done", "truncated", "error")
MAX_RULE_SCORE = 1000.0


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """v2 added trust: `verified`/`verified_by` (a v1 real record was played; a synthetic one counts
    when its provenance shows a successful replay), `imported_from` and `review` (unset)."""
    out = dict(data, schema_version=2)
    if out.get("kind") in ("episode", "step"):
        validation = (
            (out.get("provenance") or {}).get("validation") if isinstance(out.get("provenance"), dict) else None
        )
        if out.get("source", "real") == "real":
            out.setdefault("verified", True)
            out.setdefault("verified_by", "env")
        elif isinstance(validation, dict) and validation.get("replayed") and validation.get("success"):
            out.setdefault("verified", True)
            out.setdefault("verified_by", "replay")
    return out


# schema_version -> function turning a record dict of that version into the next version's.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2}


class ImportValidationError(BankError, ValueError):
    """An import file has bad lines; `errors` lists (line number, message)."""

    def __init__(self, path: Path, errors: list[tuple[int, str]], total: int):
        self.path = path
        self.errors = errors
        shown = "\n".join(f"  line {n}: {msg}" for n, msg in errors)
        more = f"\n  ... and {total - len(errors)} more" if total > len(errors) else ""
        super().__init__(f"{path}: {total} bad line(s), nothing imported:\n{shown}{more}")


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not allowed (numbers must be finite)")


def _longest_string(value: Any, depth: int = 0) -> tuple[int, int]:
    """(longest string length, deepest nesting) inside a parsed JSON value."""
    if isinstance(value, str):
        return len(value), depth
    if isinstance(value, dict):
        items: Iterable[Any] = list(value.keys()) + list(value.values())
    elif isinstance(value, list):
        items = value
    else:
        return 0, depth
    longest, deepest = 0, depth
    for item in items:
        n, d = _longest_string(item, depth + 1)
        longest, deepest = max(longest, n), max(deepest, d)
    return longest, deepest


def migrate_record(data: dict[str, Any]) -> dict[str, Any]:
    """Bring a record dict to `SCHEMA_VERSION`.

    Raises:
        ValueError: the version is missing, newer than this crl, or has no migration.
    """
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ValueError("schema_version must be an integer")
    if version > SCHEMA_VERSION:
        raise ValueError(f"schema_version {version} is newer than this crl supports ({SCHEMA_VERSION}); upgrade crl")
    while version < SCHEMA_VERSION:
        if version not in MIGRATIONS:
            raise ValueError(f"schema_version {version} is unknown; this crl reads versions 1 to {SCHEMA_VERSION}")
        data = MIGRATIONS[version](data)
        version = data["schema_version"]
    return data


def _validation_message(e: ValidationError) -> str:
    parts = []
    for err in e.errors()[:3]:
        loc = ".".join(str(x) for x in err["loc"]) or "record"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def _lines(path: Path, max_bytes: int) -> Iterable[tuple[int, bytes | None]]:
    """Lines of `path` as (number, bytes); None for a line longer than `max_bytes` (skipped)."""
    with open(path, "rb") as f:
        n = 0
        while True:
            raw = f.readline(max_bytes + 1)
            if not raw:
                return
            n += 1
            if len(raw) > max_bytes and not raw.endswith(b"\n"):
                while raw and not raw.endswith(b"\n"):
                    raw = f.readline(1 << 20)
                yield n, None
                continue
            yield n, raw


def _task_family(task: str) -> tuple[str, str]:
    return task.split("/", 1)[0], task.split("?", 1)[0].split("/", 1)[-1]


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-6 * max(1.0, abs(a), abs(b))


def consistency_problems(record: AnyRecord) -> list[str]:
    """What is inconsistent or unstorable in one imported record (empty: nothing)."""
    problems: list[str] = []
    if isinstance(record, RuleRecord):
        if record.scope != RULE_SCOPE_ALL and (p := family_problem(record.scope)):
            problems.append(p)
        if abs(record.score) > MAX_RULE_SCORE:
            problems.append(f"score {record.score} is outside [-{MAX_RULE_SCORE:g}, {MAX_RULE_SCORE:g}]")
        return problems
    for p in (family_problem(record.family), id_problem("episode_id", record.episode_id)):
        if p:
            problems.append(p)
    if record.run_id and (p := id_problem("run_id", record.run_id)):
        problems.append(p)
    family, variant = _task_family(record.task)
    if (family, variant) != (record.family, record.variant):
        problems.append(f"task {record.task!r} is not of family {record.family!r} and variant {record.variant!r}")
    if not 0.0 <= record.value <= 1.0:
        problems.append(f"value {record.value} is outside [0, 1]")
    if isinstance(record, StepRecord):
        if record.episode_length is not None and record.index >= record.episode_length:
            problems.append(f"step index {record.index} is not below episode_length {record.episode_length}")
        return problems
    if record.status not in STATUSES:
        problems.append(f"status {record.status!r} is not one of {', '.join(STATUSES)}")
    if record.success != (record.outcome == "success"):
        problems.append(f"outcome {record.outcome!r} disagrees with success={str(record.success).lower()}")
    if (record.outcome == "unfinished") != (record.status == "running"):
        problems.append(f"outcome {record.outcome!r} disagrees with status {record.status!r}")
    steps = record.trajectory
    if record.length != len(steps):
        problems.append(f"length {record.length} but the trajectory has {len(steps)} step(s)")
    total = float(sum(s.reward for s in steps))
    if not _close(total, record.total_return):
        problems.append(f"total_return {record.total_return} but the trajectory's rewards sum to {total}")
    invalid = sum(1 for s in steps if not s.valid)
    if record.invalid_steps != invalid:
        problems.append(f"invalid_steps {record.invalid_steps} but the trajectory has {invalid} invalid step(s)")
    if [s.index for s in steps] != list(range(len(steps))):
        problems.append("trajectory step indices are not 0, 1, 2, ...")
    return problems


def step_problems(step: StepRecord, episode: EpisodeRecord) -> list[str]:
    """What in an imported step disagrees with its episode (from the same file)."""
    problems = []
    for name in ("run_id", "task", "seed"):
        if getattr(step, name) != getattr(episode, name):
            problems.append(f"{name} {getattr(step, name)!r} differs from its episode's {getattr(episode, name)!r}")
    if step.episode_outcome != episode.outcome:
        problems.append(f"episode_outcome {step.episode_outcome!r} differs from its episode's {episode.outcome!r}")
    if not _close(step.episode_return, episode.total_return):
        problems.append(f"episode_return {step.episode_return} differs from its episode's {episode.total_return}")
    if step.index >= episode.length:
        problems.append(f"step index {step.index} is beyond its episode's {episode.length} step(s)")
    elif step.action != episode.trajectory[step.index].action or not _close(
        step.reward, episode.trajectory[step.index].reward
    ):
        problems.append(f"action or reward differs from step {step.index} of its episode's trajectory")
    if step.episode_length is not None and step.episode_length != episode.length:
        problems.append(f"episode_length {step.episode_length} differs from its episode's {episode.length}")
    return problems


def read_import(
    path: str | Path,
    max_line_bytes: int,
    max_field_chars: int,
    check: bool = True,
    skipped: list[tuple[int, str]] | None = None,
) -> list[AnyRecord]:
    """Validate every line of an import file and return its records.

    Args:
        check: also check each record's consistency (`consistency_problems`, `step_problems`).
        skipped: when given, bad lines are left out and listed here as (line, message) instead
            of failing the whole file (journal replay of an import made by an older crl).

    Raises:
        ImportValidationError: any line is bad (the message lists them by line number).
        FileNotFoundError: `path` does not exist.
    """
    path = Path(path)
    errors: list[tuple[int, str]] = []
    total_bad = 0
    records: list[AnyRecord] = []
    seen: dict[str, int] = {}

    def bad(n: int, msg: str) -> None:
        nonlocal total_bad
        total_bad += 1
        if skipped is not None:
            skipped.append((n, msg))
        elif len(errors) < MAX_REPORTED_ERRORS:
            errors.append((n, msg))

    for n, raw in _lines(path, max_line_bytes):
        if raw is None:
            bad(n, f"longer than {max_line_bytes} bytes")
            continue
        if not raw.strip():
            continue
        try:
            data = json.loads(raw, parse_constant=_reject_constant)
        except (ValueError, UnicodeDecodeError) as e:
            bad(n, f"not valid JSON ({e})")
            continue
        if not isinstance(data, dict):
            bad(n, "expected a JSON object (one record per line)")
            continue
        longest, deepest = _longest_string(data)
        if longest > max_field_chars:
            bad(n, f"a string of {longest} characters exceeds the {max_field_chars} limit")
            continue
        if deepest > 32:
            bad(n, "nested more than 32 levels deep")
            continue
        if data.get("kind") not in KINDS:
            bad(n, f"kind must be one of {', '.join(KINDS)}, not {data.get('kind')!r}")
            continue
        try:
            data = migrate_record(data)
            record = record_from_dict(data)
        except ValidationError as e:
            bad(n, _validation_message(e))
            continue
        except ValueError as e:
            bad(n, str(e))
            continue
        if record.id in seen:
            bad(n, f"duplicate id {record.id} (first on line {seen[record.id]})")
            continue
        problems = consistency_problems(record) if check else []
        if problems:
            bad(n, f"{record.id}: " + "; ".join(problems[:3]))
            continue
        seen[record.id] = n
        records.append(record)
    if check:
        records = _check_steps(records, seen, bad)
    if total_bad and skipped is None:
        raise ImportValidationError(path, errors, total_bad)
    return records


def _check_steps(records: list[AnyRecord], lines: dict[str, int], bad: Callable[[int, str], None]) -> list[AnyRecord]:
    """Records whose steps agree with their episode when the file holds it (the others reported)."""
    episodes = {(r.family, r.episode_id): r for r in records if isinstance(r, EpisodeRecord)}
    kept = []
    for r in records:
        if isinstance(r, StepRecord) and (ep := episodes.get((r.family, r.episode_id))) is not None:
            problems = step_problems(r, ep)
            if problems:
                bad(lines[r.id], f"{r.id}: " + "; ".join(problems[:3]))
                continue
        kept.append(r)
    return kept


def export_lines(records: Iterable[AnyRecord]) -> list[str]:
    """Records as export lines, in a stable order (kind, then id)."""
    order = {k: i for i, k in enumerate(KINDS)}
    rows = sorted(records, key=lambda r: (order[r.kind], r.id))
    return [json.dumps(r.model_dump(mode="json"), ensure_ascii=False, allow_nan=False, sort_keys=True) for r in rows]


def write_export(path: str | Path, records: Iterable[AnyRecord]) -> int:
    """Write records to `path` atomically (a temporary file renamed into place); returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = export_lines(records)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return len(lines)
