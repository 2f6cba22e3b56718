"""Export and import of records as JSONL, one record per line, validated before anything is written.

An export line is a record's `model_dump` (with `kind` and `schema_version`). An import is
read whole and checked line by line: over-long lines, bad JSON, NaN or Infinity, strings
longer than `max_field_chars`, wrong types, unknown fields, unknown or newer schema versions
and duplicate ids are all reported with their line numbers, and `ImportValidationError` is
raised before the bank changes. Records of an older schema version go through `MIGRATIONS`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from crl.memory.errors import BankError
from crl.memory.records import KINDS, SCHEMA_VERSION, AnyRecord, record_from_dict

MAX_REPORTED_ERRORS = 20

# schema_version -> function turning a record dict of that version into the next version's.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


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


def read_import(path: str | Path, max_line_bytes: int, max_field_chars: int) -> list[AnyRecord]:
    """Validate every line of an import file and return its records.

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
        if len(errors) < MAX_REPORTED_ERRORS:
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
        seen[record.id] = n
        records.append(record)
    if total_bad:
        raise ImportValidationError(path, errors, total_bad)
    return records


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
