"""Text environments behind one interface (`TextEnv`), named `family/variant`."""

from crl.tasks.base import Observation, SeedFolds, StepOutcome, TaskSpec, TextEnv
from crl.tasks.registry import fold_seeds, get_task, list_tasks, make_env, register

__all__ = [
    "Observation",
    "StepOutcome",
    "TextEnv",
    "TaskSpec",
    "SeedFolds",
    "register",
    "get_task",
    "list_tasks",
    "make_env",
    "fold_seeds",
]
