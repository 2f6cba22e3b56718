"""Lazy re-exports for package `__init__`s: names resolve on first use, so importing a package
(and `crl --help`) does not pull in chromadb, torch or transformers."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`__getattr__` and `__dir__` for `package` that import `exports[name]` on first use.

    A value is a module path (the attribute has the same name there) or `module:attribute`.
    Example: `__getattr__, __dir__ = lazy_exports(__name__, {"ExperienceBank": "crl.memory.bank"})`.
    """

    def __getattr__(name: str) -> Any:
        target = exports.get(name)
        if target is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = target.partition(":")
        value = getattr(importlib.import_module(module), attribute or name)
        importlib.import_module(package).__dict__[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(importlib.import_module(package).__dict__) | set(exports))

    return __getattr__, __dir__
