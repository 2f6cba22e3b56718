"""Shared plumbing for the external game suites: engine lifecycle, crash reporting, action matching.

TextWorldExpress and ScienceWorld each run a bundled Java engine reached through py4j. An env
owns at most one engine (`JavaEngine`): started on first use, reused across every `reset`,
restarted after a crash and shut by `close()`. A crash surfaces as `EngineError`, the one
exception a runner should treat as "episode errored, retry it" rather than "episode failed";
the TextWorld adapter raises it too, so the name is about engines in general, not Java.

The suites are optional (`pip install 'complementary-rl[envs]'`): modules that register their
tasks import them only when an env is built (`import_suite`).
"""

from __future__ import annotations

import importlib
import re
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Generic, TypeVar

from crl.tasks.base import TaskError

Handle = TypeVar("Handle")

ENVS_EXTRA = "pip install 'complementary-rl[envs]'"
ARTICLES = frozenset({"the", "a", "an"})
DIRECTIONS = frozenset({"north", "south", "east", "west", "up", "down"})
MOVE_VERBS = frozenset({"go", "move", "walk", "run", "head"})


class EngineError(TaskError, RuntimeError):
    """A game engine crashed or stopped answering during `reset` or `step`.

    The env has already tried to restart its engine (see the message); the episode in progress
    is lost. Mark it errored (not failed) and play it again from `reset(seed)`.
    """


class SuiteNotInstalled(ImportError):
    """The Python package of an optional game suite is missing."""


def import_suite(module: str, package: str) -> ModuleType:
    """Import an optional suite's module, or raise `SuiteNotInstalled` naming the pip command.

    Example:
        >>> import_suite("json", "json").__name__
        'json'
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise SuiteNotInstalled(
            f"this task needs the `{package}` package, which is not installed: "
            f"run `{ENVS_EXTRA}` (or `pip install {package}`)"
        ) from exc


class JavaEngine(Generic[Handle]):
    """One py4j-backed engine: lazily started, reused, restarted after a crash, shut on `close`.

    Args:
        suite: the suite's name, for messages ("TextWorldExpress").
        start: builds a ready engine handle (the suite's Python env object, game loaded).
    """

    def __init__(self, suite: str, start: Callable[[], Handle]):
        self.suite = suite
        self._start = start
        self._handle: Handle | None = None
        self.starts = 0

    @property
    def handle(self) -> Handle:
        """The running engine, started now if needed."""
        if self._handle is None:
            self._handle = self._start()
            self.starts += 1
        return self._handle

    @property
    def running(self) -> bool:
        return self._handle is not None

    @contextmanager
    def guard(self, what: str) -> Iterator[None]:
        """Turn a py4j failure inside the block into `EngineError`, after restarting the engine.

        Errors raised by the suite's Python code itself (a bad game parameter is a ValueError)
        pass through unchanged: they are the caller's mistake, not a crash.
        """
        from py4j.protocol import Py4JError

        try:
            yield
        except Py4JError as exc:
            raise self._crashed(what, exc) from exc

    def _crashed(self, what: str, exc: BaseException) -> EngineError:
        self.close()
        try:
            self.handle  # noqa: B018  (restart now, so a dead JVM shows up in this message)
            restart = "it was restarted"
        except Exception as again:  # a failed restart is reported, and retried on next use
            self._handle = None
            restart = f"restarting it failed too ({_first_line(again)})"
        return EngineError(
            f"the {self.suite} engine failed during {what}: {_first_line(exc)}; {restart}. "
            "This episode is lost: call reset(seed) to play it again."
        )

    def close(self) -> None:
        """Shut the engine down (its Java process included); the next use starts a new one."""
        handle, self._handle = self._handle, None
        if handle is not None:
            shutdown_java(handle)


def shutdown_java(handle: object) -> None:
    """Close a suite's py4j env object and make sure its Java process has exited."""
    gateway = getattr(handle, "_gateway", None)
    process = java_process(handle)
    if process is None or process.poll() is None:
        try:
            handle.close()  # type: ignore[attr-defined]
        except Exception:  # a wedged gateway cannot be closed politely; the process is killed below
            pass
    elif gateway is not None:
        # The JVM is gone. Marking the client disconnected turns py4j's later clean-ups (object
        # finalizers that run at any garbage collection) into no-ops instead of reconnection
        # attempts that each log a traceback.
        client = gateway._gateway_client
        client.is_connected = False
        client.close()
        gateway.shutdown_callback_server()
    # Both suites' wrappers close again in __del__ and print tracebacks for a dead gateway.
    handle.close = lambda: None  # type: ignore[attr-defined]
    if process is not None:
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    # Left open, these would be closed by finalizers at some later garbage collection, with a
    # ResourceWarning each.
    for stream in (getattr(process, "stdin", None), getattr(process, "stdout", None)):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass
    temp_file = getattr(handle, "_obj_tree_tempfile", None)  # TextWorldExpress
    if temp_file is not None:
        temp_file.close()
    temp_dir = getattr(handle, "_obj_tree_tempdir", None)  # ScienceWorld
    if temp_dir is not None:
        temp_dir.cleanup()


def java_process(handle: object) -> subprocess.Popen | None:
    """The Java process behind a suite's env object (tests kill it to simulate a crash)."""
    return getattr(getattr(handle, "_gateway", None), "java_process", None)


def normalise_action(text: str) -> str:
    """Lower case, single spaces, no surrounding quotes or final punctuation.

    Example:
        >>> normalise_action("  Take the  COIN. ")
        'take the coin'
    """
    text = " ".join(text.split()).lower()
    return re.sub(r"^[`'\"]+|[`'\".!?;]+$", "", text).strip()


def without_articles(text: str) -> str:
    """`text` without the words "the", "a" and "an"."""
    return " ".join(w for w in text.split() if w not in ARTICLES)


def match_action(text: str, candidates: list[str], move_verb: str | None = None) -> str | None:
    """The candidate action that `text` names, or None.

    Case, spacing, final punctuation and articles are ignored; with `move_verb`, a bare
    direction or another movement verb ("go east", "east") means `f"{move_verb} east"`.

    Example:
        >>> match_action("Go East.", ["move east", "take coin"], move_verb="move")
        'move east'
    """
    key = normalise_action(text)
    exact = {normalise_action(c): c for c in candidates}
    if key in exact:
        return exact[key]
    loose: dict[str, list[str]] = {}
    for c in candidates:
        loose.setdefault(without_articles(normalise_action(c)), []).append(c)
    words = without_articles(key).split()
    if move_verb and words and words[-1] in DIRECTIONS and (len(words) == 1 or words[0] in MOVE_VERBS):
        words = [move_verb, *words[1:]] if len(words) > 1 else [move_verb, words[0]]
    found = loose.get(" ".join(words), [])
    return found[0] if len(found) == 1 else None


def invalid_feedback(action: str) -> str:
    """What an env shows after an action it cannot play (the keyroom wording)."""
    return f"Nothing happens: '{' '.join(action.split())}' is not a valid action here."


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()
