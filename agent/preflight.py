"""What a command checks before anything heavy loads: the data directory's added tasks, the run's
counts, and whether the embedded store it would write to is free. Light on purpose (no Chroma,
no torch), so a refused `crl run` answers in about a second."""

from __future__ import annotations

from crl.agent.config import Settings


def see_added_tasks(settings: Settings) -> None:
    """Point the task registry at the tasks `crl tasks add` registered in this data directory, when
    it has any (an experiment's per-arm data directories have none: the tasks of the directory the
    command started in stay in use)."""
    from crl.tasks.registrations import registrations_path
    from crl.tasks.registry import use_user_tasks

    path = registrations_path(settings.home)
    if path.exists():
        use_user_tasks(path)


def check_run_request(episodes: int, seed_start: int = 0) -> None:
    """Refuse a run of fewer than one episode or a negative seed offset (they would wrap the seed slice)."""
    if episodes < 1:
        raise ValueError(f"--episodes must be at least 1, got {episodes}")
    if seed_start < 0:
        raise ValueError(f"--seed must be 0 or more (an offset into the task's seeds), got {seed_start}")


def uses_memory_in_loop(settings: Settings) -> bool:
    """Whether episodes retrieve from memory (for prompts or for the policy)."""
    return reads_memory(settings.memory.enabled, settings.agent.policy, settings.agent.memory)


def reads_memory(enabled: bool, policy: str, prompt_memory: str) -> bool:
    """Whether episodes with memory `enabled`, this `policy` and this `agent.memory` prompt mode
    retrieve from memory: the random policy never does, and the llm policy only for its prompts."""
    return bool(enabled) and policy != "random" and (prompt_memory != "off" or policy != "llm")


def needs_bank(settings: Settings, kind: str) -> bool:
    """Whether a run of `kind` ("run" or "eval") opens the experience bank: to store what it
    plays, or (an evaluation) to read memory in the loop."""
    return settings.memory.enabled and (kind != "eval" or uses_memory_in_loop(settings))


def probe_store(settings: Settings, kind: str = "run") -> None:
    """Fail now when the embedded store a run would open is owned by another process
    (`StoreLockedError`, which says how to share it), or its folder cannot be made. The lock is
    taken and given back at once; the run takes it for good when it opens the bank."""
    if not needs_bank(settings, kind) or settings.memory.server_mode:
        return
    from crl.memory.storage.locks import StoreLock

    StoreLock(settings.memory_dir, settings.memory.lock_timeout_s).release()
