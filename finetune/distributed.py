"""The few decisions that must be taken once under `accelerate launch`: on the main process, then shared.

Without a launcher (one process) these are plain calls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def _state():
    import torch
    from accelerate import PartialState

    # Without cpu=True, workers on a machine without GPUs would not see each other (no gloo group).
    return PartialState(cpu=not torch.cuda.is_available())


def is_main_process() -> bool:
    """True in a single process, and in the main one of a distributed launch."""
    return _state().is_main_process


def num_processes() -> int:
    return _state().num_processes


def on_main(fn: Callable[[], T]) -> T:
    """Run `fn` on the main process only and give its (picklable) result to every process."""
    state = _state()
    if state.num_processes == 1:
        return fn()
    from accelerate.utils import broadcast_object_list

    box = [fn() if state.is_main_process else None]
    broadcast_object_list(box, from_process=0)
    return box[0]  # type: ignore[return-value]


def wait_for_everyone() -> None:
    """A barrier (a no-op in a single process)."""
    state = _state()
    if state.num_processes > 1:
        state.wait_for_everyone()
