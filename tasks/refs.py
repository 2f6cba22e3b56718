"""References to Python functions by name: `package.module:function` or `path/to/file.py:function`.

Checkers (`crl.tasks.checkers`) and tools (`TaskSpec.tools`) are named this way in JSONL task
registrations and entry points, so they can live in a user's own package or in a loose file.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

from crl.tasks.base import TaskError


def split_ref(ref: str) -> tuple[str, str]:
    """The `(module or file, function)` halves of `ref`, or a TaskError saying what a reference looks like.

    Example: `split_ref("examples/arithmetic/tools.py:calculator")` is
    `("examples/arithmetic/tools.py", "calculator")`.
    """
    where, sep, name = ref.rpartition(":")
    if not sep or not where or not name.isidentifier():
        raise TaskError(
            f"bad function reference {ref!r}: write `package.module:function` or `path/to/file.py:function`"
        )
    return where, name


def is_file_ref(ref: str) -> bool:
    """Whether `ref` names a file (`path/to/file.py:function`) rather than an importable module."""
    where, _ = split_ref(ref)
    return where.endswith(".py") or "/" in where or "\\" in where


def absolute_ref(ref: str, base: Path | None = None) -> str:
    """`ref` with a file path made absolute (relative to `base`, default the working directory),
    so a registration keeps working from another directory; module references are kept as they are."""
    if not is_file_ref(ref):
        split_ref(ref)
        return ref
    where, name = split_ref(ref)
    path = Path(where).expanduser()
    if not path.is_absolute():
        path = (base or Path.cwd()) / path
    return f"{path.resolve()}:{name}"


def resolve_ref(ref: str) -> Callable:
    """The callable that `ref` names, imported now.

    Raises:
        TaskError: the module or file cannot be imported, it has no such attribute, or the
            attribute is not callable; the message names the reference and the fix.
    """
    where, name = split_ref(ref)
    module = _load_file(where, ref) if is_file_ref(ref) else _import(where, ref)
    try:
        target = getattr(module, name)
    except AttributeError:
        raise TaskError(f"{ref!r}: {where} defines no {name!r}; check the spelling after the colon") from None
    if not callable(target):
        raise TaskError(f"{ref!r}: {name} is a {type(target).__name__}, not a function")
    return target


def _import(module: str, ref: str):
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise TaskError(
            f"{ref!r}: cannot import module {module!r} ({exc}); install its package, or name a file as path/to/file.py:{ref.rpartition(':')[2]}"
        ) from None
    except Exception as exc:
        raise TaskError(f"{ref!r}: importing {module} failed: {type(exc).__name__}: {exc}") from None


def _load_file(where: str, ref: str):
    path = Path(where).expanduser().resolve()
    if not path.is_file():
        raise TaskError(f"{ref!r}: no file {path}; give the path of an existing .py file")
    key = "crl_ref_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, path)
    if spec is None or spec.loader is None:
        raise TaskError(f"{ref!r}: {path} cannot be loaded as Python; name a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[key]
        raise TaskError(f"{ref!r}: importing {path} failed: {type(exc).__name__}: {exc}") from None
    return module
