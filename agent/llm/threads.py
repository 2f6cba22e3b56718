"""Size torch's CPU thread pool to the cores this process may actually use."""

from __future__ import annotations

import os

import torch

_configured = False


def available_cores() -> int:
    """Cores the OS lets this process run on (its affinity mask), at least 1.

    `os.cpu_count()` counts the whole machine, which oversubscribes a container or a pinned job.
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS and Windows have no affinity API
        return max(1, os.cpu_count() or 1)


def configure_torch_threads() -> int:
    """Set torch's intra-op threads once per process; return the count in use.

    `CRL_THREADS` wins when set; with `OMP_NUM_THREADS` set, torch already follows it and is
    left alone; otherwise the pool gets `available_cores()` threads.
    """
    global _configured
    if not _configured:
        _configured = True
        explicit = os.environ.get("CRL_THREADS", "").strip()
        if explicit:
            try:
                torch.set_num_threads(max(1, int(explicit)))
            except ValueError as error:
                raise ValueError(f"CRL_THREADS must be a whole number of threads, got {explicit!r}") from error
        elif not os.environ.get("OMP_NUM_THREADS", "").strip():
            torch.set_num_threads(available_cores())
    return torch.get_num_threads()
