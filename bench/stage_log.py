"""A benchmark's stages, appended to a JSONL file as each one ends, so a long run can be resumed.

A rerun with the same file skips every stage already recorded (with the same parameters) and
reuses its row; a stage is written only once it has finished, so a kill loses at most the
stage that was running.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


class StageLog:
    """Rows of finished stages, keyed by stage name, kept in `path` (one JSON object per line)."""

    def __init__(self, path: Path, echo: bool = True):
        self.path = Path(path)
        self.echo = echo
        self.rows: list[dict[str, Any]] = []
        self._done: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            for line in self.path.read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    self._done[row["stage"]] = row

    def recorded(self) -> list[dict[str, Any]]:
        """The rows already in the file (the latest row of each stage)."""
        return list(self._done.values())

    def run(self, stage: str, work: Callable[[], dict[str, Any]], **params: Any) -> dict[str, Any]:
        """The row of `stage`: reused when recorded before with the same `params`, else `work()` is run and recorded."""
        previous = self._done.get(stage)
        if previous is not None and all(previous.get(k) == v for k, v in params.items()):
            row = previous | {"reused": True}
        else:
            row = {"stage": stage} | params | work()
            with self.path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            self._done[stage] = row
        return self._report(row)

    def skip(self, stage: str, **fields: Any) -> dict[str, Any]:
        """Report a stage that did not run (say why in `fields`); it is not recorded, so a rerun tries it again."""
        return self._report({"stage": stage, "skipped": True} | fields)

    def _report(self, row: dict[str, Any]) -> dict[str, Any]:
        self.rows.append(row)
        if self.echo:
            print(json.dumps(row), flush=True)
        return row
