"""One local training at a time per machine.

On CPU even the 135M model's LoRA training peaks at several GB (4.7 GB one example per micro-step
on ~900-token prompts, 12.6 GB at four: the activations of the micro-batch), so a second training
started beside the first, by another `crl` process, can get one of them killed for memory, losing
the work of every stage before it. Each
training therefore holds an OS file lock under the machine cache (`~/.cache/crl/locks/train.lock`),
released however its process ends; a second one waits, saying for whom, and then starts.
A distributed launch (several processes of one job) never waits: its ranks train together.

A finished training also hands its freed heap back to the OS (`return_freed_memory`): glibc keeps
the freed pages of a training in the process, so an experiment that trains in-process went on
holding them through every later stage (measured: 11.1 GB RSS, 2.1 GB after `malloc_trim`).
"""

from __future__ import annotations

import ctypes
import gc
import os
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from crl.cache_dirs import machine_cache_dir


def lock_path() -> Path:
    """The machine-wide training lock."""
    return machine_cache_dir("locks") / "train.lock"


def _owner(path: Path) -> str:
    try:
        return path.with_suffix(".owner").read_text().strip() or "another process"
    except OSError:
        return "another process"


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextmanager
def training_slot(
    enabled: bool = True, path: Path | None = None, on_wait: Callable[[str], None] = _say, poll_s: float = 2.0
) -> Iterator[None]:
    """Hold the machine's training slot for the body, first waiting for the training that holds it.

    Args:
        enabled: False (`finetune.one_at_a_time = false`, or a distributed launch) holds nothing.
        path: the lock file (default: `lock_path()`).
        on_wait: told once, when the slot is taken, who holds it.
        poll_s: how often a waiting process retries.
    """
    if not enabled:
        yield
        return
    path = path or lock_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path), thread_local=False, preserve_lock_file=True)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        on_wait(
            f"Waiting for another training on this machine to finish ({_owner(path)}); two at once "
            "can run out of memory (finetune.one_at_a_time = false trains anyway)."
        )
        lock.acquire(poll_interval=poll_s)
    try:
        path.with_suffix(".owner").write_text(f"pid {os.getpid()} on {socket.gethostname()}\n")
        yield
    finally:
        lock.release()


def return_freed_memory() -> bool:
    """Collect garbage and hand the heap's free pages back to the OS (glibc's `malloc_trim`).

    Returns:
        Whether memory was returned (False where there is no glibc, or nothing to return).
    """
    gc.collect()
    if not sys.platform.startswith("linux"):
        return False
    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False
