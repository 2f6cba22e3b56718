"""The JSONL tasks a user added with `crl tasks add`, kept in one small JSON file.

The file lives in the data directory (`<home>/tasks.json`; the agent side passes its path, as
`tasks/` knows nothing of settings) and maps each short name to where the items are, the
checker, the tools and the step budget. Paths are stored absolute, so a task added from one
directory plays from any other.

Example of the file:
    {"version": 1, "tasks": {"arithmetic": {"path": "/home/me/crl/examples/arithmetic/items.jsonl",
     "checker": {"kind": "numeric", "abs_tol": 0.01}, "tools": ["/home/me/crl/examples/arithmetic/tools.py:calculator"],
     "max_steps": 6}}}
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from crl.tasks.base import TaskError, TaskSpec
from crl.tasks.checkers import CheckerSpec
from crl.tasks.jsonl_tasks import DEFAULT_MAX_STEPS, FAMILY, check_name, jsonl_spec
from crl.tasks.refs import absolute_ref, resolve_ref

FILE_NAME = "tasks.json"


class Registration(BaseModel):
    """One added task."""

    model_config = ConfigDict(extra="forbid")

    path: str = Field(description="Absolute path of the JSONL file of items.")
    checker: CheckerSpec = Field(description="What decides success.")
    tools: list[str] = Field(default_factory=list, description="Tool references offered to the agent.")
    max_steps: int = Field(DEFAULT_MAX_STEPS, ge=1, description="Tool calls plus the final answer.")
    description: str | None = Field(None, description="One line for `crl tasks` (default: counts and checker).")

    def spec(self, name: str) -> TaskSpec:
        """The task's spec (reads and validates its items)."""
        return jsonl_spec(name, self.path, self.checker, tuple(self.tools), self.max_steps, self.description)


class RegistrationFile(BaseModel):
    """The whole file."""

    model_config = ConfigDict(extra="forbid")

    version: int = 1
    tasks: dict[str, Registration] = Field(default_factory=dict)


def registrations_path(home: str | Path) -> Path:
    """Where the data directory `home` keeps its added tasks."""
    return Path(home) / FILE_NAME


def read_registrations(path: str | Path) -> dict[str, Registration]:
    """The added tasks by short name; none when the file does not exist yet.

    Raises:
        TaskError: the file is not valid; the message names it and what to fix.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        return RegistrationFile.model_validate_json(text).tasks
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise TaskError(
            f"{path} is not a valid task registration file ({where}: {first['msg']}); "
            "fix it by hand, or delete it and add the tasks again with `crl tasks add`"
        ) from None


def add_registration(
    path: str | Path,
    name: str,
    items: str | Path,
    checker: CheckerSpec,
    tools: tuple[str, ...] | list[str] = (),
    max_steps: int = DEFAULT_MAX_STEPS,
    description: str | None = None,
    replace: bool = False,
) -> TaskSpec:
    """Check and record task `jsonl/<name>`, and return its spec.

    The items are read and validated with the checker, a Python checker and every tool are
    imported once, and file paths are made absolute, so a mistake shows now rather than in the
    middle of a run.

    Raises:
        TaskError: a bad name or item, an unimportable function, or the name is taken and
            `replace` is False.
    """
    short = check_name(name)
    known = read_registrations(path)
    if short in known and not replace:
        raise TaskError(
            f"task {FAMILY}/{short} is already added; pass --replace to overwrite it, or pick another --name"
        )
    checker = checker.model_copy(update={"function": absolute_ref(checker.function)}) if checker.function else checker
    tools = [absolute_ref(t) for t in tools]
    reg = Registration(
        path=str(Path(items).expanduser().resolve()),
        checker=checker,
        tools=tools,
        max_steps=max_steps,
        description=description,
    )
    spec = reg.spec(short)
    for ref in ([checker.function] if checker.function else []) + tools:
        resolve_ref(ref)
    _write(Path(path), known | {short: reg})
    return spec


def remove_registration(path: str | Path, name: str) -> Registration:
    """Forget task `jsonl/<name>` (its items file is left alone) and return what was recorded.

    Raises:
        TaskError: no task of that name was added.
    """
    short = name.removeprefix(f"{FAMILY}/")
    known = read_registrations(path)
    if short not in known:
        listed = ", ".join(f"{FAMILY}/{n}" for n in sorted(known)) or "none"
        raise TaskError(f"no added task {FAMILY}/{short}; added tasks: {listed}")
    removed = known.pop(short)
    _write(Path(path), known)
    return removed


def _write(path: Path, tasks: dict[str, Registration]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = RegistrationFile(tasks=dict(sorted(tasks.items()))).model_dump(mode="json", exclude_defaults=False)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
