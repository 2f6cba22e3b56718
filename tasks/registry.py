"""Which tasks exist, how to build them, and their train/dev/test seed folds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from tasks.base import TextEnv

FOLDS = ("train", "dev", "test")


@dataclass(frozen=True)
class SeedFolds:
    """Disjoint seed ranges: `train` for collecting experience, `dev` for gating, `test` for reports."""

    train: range = range(0, 100_000)
    dev: range = range(100_000, 101_000)
    test: range = range(200_000, 201_000)

    def get(self, fold: str) -> range:
        if fold not in FOLDS:
            raise ValueError(f"unknown fold {fold!r}; choose one of {', '.join(FOLDS)}")
        return getattr(self, fold)


@dataclass(frozen=True)
class TaskSpec:
    """A named task: `family/variant`, a factory, its folds and a one-line description.

    `uses_cache_dir`: the factory takes `cache_dir=` (where generated games are kept); the
    agent passes `<home>/games`.
    """

    name: str
    factory: Callable[..., TextEnv]
    description: str
    folds: SeedFolds = field(default_factory=SeedFolds)
    max_steps: int = 20
    uses_cache_dir: bool = False

    @property
    def family(self) -> str:
        return self.name.split("/", 1)[0]

    @property
    def variant(self) -> str:
        return self.name.split("/", 1)[1]


_TASKS: dict[str, TaskSpec] = {}


def register(spec: TaskSpec) -> TaskSpec:
    """Add a task to the registry (later registrations with the same name replace earlier ones)."""
    _TASKS[spec.name] = spec
    return spec


def _load_builtin() -> None:
    import tasks.keyroom  # noqa: F401  (registers keyroom/*)
    import tasks.twx  # noqa: F401  (twx/*; imports textworld-express only when an env is built)
    import tasks.sciworld  # noqa: F401  (sciworld/*; imports scienceworld only when an env is built)
    import tasks.textworld_games  # noqa: F401  (tw/*; imports textworld only when an env is built)


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
