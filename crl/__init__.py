"""Complementary RL: LLM agents that get better at text tasks by reusing their own experience.

The public API (see `crl.api`) is importable from here; names load on first use, so
`import crl` stays fast:

    import crl

    cfg = crl.settings(home=".crl-demo")
    result = crl.run("keyroom/key", episodes=8, settings=cfg)
"""

from crl._lazy import lazy_exports

__version__ = "0.1.0"

_EXPORTS = {
    "settings": "crl.api",
    "run": "crl.api",
    "evaluate": "crl.api",
    "evaluate_with_retries": "crl.api",
    "RetryResult": "crl.agent.retries",
    "open_bank": "crl.api",
    "retrieve": "crl.api",
    "build_dataset": "crl.api",
    "train_round": "crl.api",
    "Settings": "crl.agent.config",
    "RunResult": "crl.agent.app",
    "ScriptedModel": "crl.agent.llm.scripted",
    "ExperienceBank": "crl.memory.bank",
    "BankError": "crl.memory.errors",
    "list_tasks": "crl.tasks.registry",
    "register_task": "crl.tasks.registry:register",
    "TaskSpec": "crl.tasks.base",
    "UserTask": "crl.tasks.user_task",
    "tool": "crl.agent.tools.tool",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
