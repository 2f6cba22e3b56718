"""Tasks from other installed packages, found through the `complementary_rl.tasks` entry point group.

A package declares, in its `pyproject.toml`:

    [project.entry-points."complementary_rl.tasks"]
    sorting = "mytasks.sorting:SortingTask"

Each entry may name a `TaskSpec`, a `UserTask` subclass, a list or tuple of either, or a
function returning one of those. Entries are loaded only when a task name is not found among
the built-in ones, or when all tasks are listed; one that fails is reported with its name and
package (`crl tasks` prints it), and the others still load.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from crl.tasks.base import TaskSpec
from crl.tasks.user_task import UserTask

GROUP = "complementary_rl.tasks"


@dataclass
class Discovery:
    """What the entry points gave: `(entry point name, spec)` pairs, and the problems by entry point name."""

    specs: list[tuple[str, TaskSpec]]
    problems: dict[str, str]


def discover(group: str = GROUP) -> Discovery:
    """Load every entry point of `group` and collect the task specs they name."""
    found = Discovery([], {})
    for ep in sorted(entry_points(group=group), key=lambda e: e.name):
        try:
            specs = specs_from(ep.load())
        except Exception as exc:
            found.problems[ep.name] = describe_failure(ep, exc)
            continue
        found.specs.extend((ep.name, spec) for spec in specs)
    return found


def specs_from(obj: object) -> list[TaskSpec]:
    """The specs that an entry point's object stands for (see the module docstring).

    Raises:
        TypeError: `obj` is none of the accepted kinds.
    """
    if isinstance(obj, TaskSpec):
        return [obj]
    if isinstance(obj, type) and issubclass(obj, UserTask):
        return [obj.spec()]
    if isinstance(obj, list | tuple):
        return [spec for part in obj for spec in _single(part)]
    if callable(obj):
        made = obj()
        if isinstance(made, Iterable) and not isinstance(made, str | TaskSpec):
            return [spec for part in made for spec in _single(part)]
        return _single(made)
    raise TypeError(f"got a {type(obj).__name__}; name a TaskSpec, a UserTask subclass, a list of them, or a function")


def _single(obj: object) -> list[TaskSpec]:
    if isinstance(obj, TaskSpec):
        return [obj]
    if isinstance(obj, type) and issubclass(obj, UserTask):
        return [obj.spec()]
    raise TypeError(f"got a {type(obj).__name__} where a TaskSpec or UserTask subclass belongs")


def describe_failure(ep: EntryPoint, exc: Exception) -> str:
    """One line naming the entry point, its package, what went wrong and the fix."""
    dist = getattr(ep, "dist", None)
    package = f"package {dist.name} {dist.version}" if dist is not None else "an installed package"
    return (
        f"task plugin {ep.name!r} ({ep.value}, from {package}) failed to load: {type(exc).__name__}: {exc}; "
        "fix or uninstall that package"
    )
