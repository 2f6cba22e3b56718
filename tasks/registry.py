"""Which tasks exist, how to build them, and their train/dev/test seed folds.

Tasks come from four places, looked up in this order: the built-in suites, the JSONL tasks a
user added (`crl tasks add`, kept in the file `use_user_tasks` names), and other packages'
`complementary_rl.tasks` entry points (`crl.tasks.plugins`); `register()` adds one directly.
The last two are read only when a name is not found earlier, or when all tasks are listed, and
one that fails to load is kept as a problem (`task_problems`) instead of breaking the others.
"""

from __future__ import annotations

import math
from pathlib import Path

from crl.tasks.base import TaskError, TaskSpec, TextEnv

_TASKS: dict[str, TaskSpec] = {}
_ORIGIN: dict[str, str] = {}
_PROBLEMS: dict[str, str] = {}
_loaded: set[str] = set()
_user_file: Path | None = None


def register(spec: TaskSpec) -> TaskSpec:
    """Add a task to the registry (later registrations with the same name replace earlier ones)."""
    _TASKS[spec.name] = spec
    _ORIGIN[spec.name] = "register()"
    return spec


BUILTIN_SUITES = ("keyroom", "twx", "sciworld", "textworld_games")


def _load_builtin() -> None:
    """Collect the built-in suites' `SPECS` (once; a user's `register()` wins over a built-in name)."""
    if "builtin" in _loaded:
        return
    import importlib

    for suite in BUILTIN_SUITES:
        for spec in importlib.import_module(f"crl.tasks.{suite}").SPECS:
            if spec.name not in _TASKS:
                _TASKS[spec.name] = spec
                _ORIGIN[spec.name] = "built-in"
    _loaded.add("builtin")


def use_user_tasks(path: str | Path | None) -> None:
    """Read the tasks added with `crl tasks add` from `path` (the agent passes `<home>/tasks.json`)
    when they are first needed; None forgets them. Calling it again re-reads the file."""
    global _user_file
    for name in [n for n, origin in _ORIGIN.items() if origin == "crl tasks add"]:
        del _TASKS[name], _ORIGIN[name]
    for key in [k for k in _PROBLEMS if k.startswith("added task")]:
        del _PROBLEMS[key]
    _user_file = None if path is None else Path(path)
    _loaded.discard("user")


def _load_user() -> None:
    if "user" in _loaded:
        return
    _loaded.add("user")
    if _user_file is None:
        return
    from crl.tasks.jsonl_tasks import FAMILY
    from crl.tasks.registrations import read_registrations

    try:
        registrations = read_registrations(_user_file)
    except TaskError as exc:
        _PROBLEMS[f"added task file {_user_file}"] = str(exc)
        return
    for short, reg in registrations.items():
        try:
            _add(reg.spec(short), "crl tasks add")
        except TaskError as exc:
            _PROBLEMS[f"added task {FAMILY}/{short}"] = (
                f"added task {FAMILY}/{short} cannot load: {exc}\n(fix the file, or `crl tasks rm {FAMILY}/{short}`)"
            )


def _load_plugins() -> None:
    if "plugins" in _loaded:
        return
    _loaded.add("plugins")
    from crl.tasks.plugins import discover

    found = discover()
    for entry, problem in found.problems.items():
        _PROBLEMS[f"task plugin {entry}"] = problem
    for entry, spec in found.specs:
        _add(spec, f"task plugin {entry}")


def _add(spec: TaskSpec, origin: str) -> None:
    taken = _ORIGIN.get(spec.name)
    if taken is not None and taken != origin:
        _PROBLEMS[f"{origin}: {spec.name}"] = (
            f"{origin} offers {spec.name}, but that name is taken ({taken}); it is ignored: rename the task"
        )
        return
    _TASKS[spec.name] = spec
    _ORIGIN[spec.name] = origin


def _load_all() -> None:
    _load_builtin()
    _load_user()
    _load_plugins()


def refresh_plugins() -> None:
    """Look for entry points again (after installing a package in a running process)."""
    for name in [n for n, origin in _ORIGIN.items() if origin.startswith("task plugin ")]:
        del _TASKS[name], _ORIGIN[name]
    for key in [k for k in _PROBLEMS if k.startswith("task plugin ")]:
        del _PROBLEMS[key]
    _loaded.discard("plugins")


def task_problems() -> list[str]:
    """Why some added tasks or plugins could not be loaded (one message each; empty when all loaded)."""
    _load_all()
    return [_PROBLEMS[k] for k in sorted(_PROBLEMS)]


def task_origin(name: str) -> str:
    """Where task `name` came from: `built-in`, `crl tasks add`, `task plugin <entry>` or `register()`."""
    get_task(name)
    return _ORIGIN.get(name.split("?", 1)[0], "register()")


def list_tasks() -> list[TaskSpec]:
    """All registered tasks, sorted by name (see `task_problems` for any that failed to load)."""
    _load_all()
    return [_TASKS[k] for k in sorted(_TASKS)]


def get_task(name: str) -> TaskSpec:
    """The spec of task `name`, or a ValueError that lists what exists (and what failed to load)."""
    base = name.split("?", 1)[0]
    for load in (_load_builtin, _load_user, _load_plugins):
        load()
        if base in _TASKS:
            return _TASKS[base]
    known = ", ".join(sorted(_TASKS)) or "none"
    hint = ""
    if base.startswith("jsonl/"):
        hint = f"; add a JSONL task with `crl tasks add FILE --name {base[6:]} --checker KIND`"
    related = [p for k, p in sorted(_PROBLEMS.items()) if base in k or base in p] or list(_PROBLEMS.values())
    failed = "\n" + "\n".join(related) if related else ""
    raise ValueError(f"unknown task {name!r}{hint}. Known tasks: {known} (see `crl tasks`){failed}")


def find_task(name: str) -> TaskSpec | None:
    """The spec of task `name`, or None where it is not registered here (a bank read without its
    task plugin): for reading what a task declares, with the default where it is unknown."""
    try:
        return get_task(name)
    except ValueError:
        return None


def parse_task_name(name: str) -> tuple[str, dict[str, int | float | str]]:
    """Split `family/variant?knob=value&...` into the base name and typed knobs.

    Example: `parse_task_name("keyroom/key?n_rooms=3")` returns `("keyroom/key", {"n_rooms": 3})`.
    """
    base, _, query = name.partition("?")
    knobs: dict[str, int | float | str] = {}
    for part in filter(None, query.split("&")):
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise ValueError(f"bad task parameter {part!r} in {name!r}; expected key=value")
        if key in knobs:
            raise ValueError(f"task parameter {key!r} is given twice in {name!r}")
        for cast in (int, float):
            try:
                number = cast(value)
            except ValueError:
                continue
            if math.isfinite(number):  # "1e400" and "nan" stay text: no knob takes them as numbers
                knobs[key] = number
                break
        else:
            knobs[key] = value
    return base, knobs


def make_env(name: str, **kwargs) -> TextEnv:
    """Build a fresh environment for task `name` (query knobs become factory arguments)."""
    base, knobs = parse_task_name(name)
    try:
        return get_task(base).factory(**(knobs | kwargs))
    except TypeError as exc:
        raise ValueError(f"task {name!r}: unsupported parameter ({exc})") from None


def fold_seeds(name: str, fold: str, n: int, start: int = 0) -> list[int]:
    """The first `n` seeds of `fold` for task `name`, after skipping `start` of them."""
    rng = get_task(name).folds.get(fold)
    if start + n > len(rng):
        raise ValueError(f"fold {fold!r} of {name} has only {len(rng)} seeds")
    return list(rng[start : start + n])
