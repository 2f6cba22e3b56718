"""Which tasks exist, how to build them, and their train/dev/test seed folds."""

from __future__ import annotations

from crl.tasks.base import TaskSpec, TextEnv

_TASKS: dict[str, TaskSpec] = {}
_builtin_loaded = False


def register(spec: TaskSpec) -> TaskSpec:
    """Add a task to the registry (later registrations with the same name replace earlier ones)."""
    _TASKS[spec.name] = spec
    return spec


BUILTIN_SUITES = ("keyroom", "twx", "sciworld", "textworld_games")


def _load_builtin() -> None:
    """Collect the built-in suites' `SPECS` (once; a user's `register()` wins over a built-in name)."""
    global _builtin_loaded
    if _builtin_loaded:
        return
    import importlib

    for suite in BUILTIN_SUITES:
        for spec in importlib.import_module(f"crl.tasks.{suite}").SPECS:
            _TASKS.setdefault(spec.name, spec)
    _builtin_loaded = True


def list_tasks() -> list[TaskSpec]:
    """All registered tasks, sorted by name."""
    _load_builtin()
    return [_TASKS[k] for k in sorted(_TASKS)]


def get_task(name: str) -> TaskSpec:
    """The spec of task `name`, or a ValueError that lists what exists."""
    _load_builtin()
    base = name.split("?", 1)[0]
    if base not in _TASKS:
        known = ", ".join(sorted(_TASKS)) or "none"
        raise ValueError(f"unknown task {name!r}. Known tasks: {known} (see `crl tasks`)")
    return _TASKS[base]


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
        for cast in (int, float):
            try:
                knobs[key] = cast(value)
                break
            except ValueError:
                continue
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
