"""Text environments behind one interface (`TextEnv`), named `family/variant`."""

from tasks.base import Observation, StepOutcome, TextEnv
from tasks.registry import TaskSpec, get_task, list_tasks, make_env, fold_seeds

__all__ = [
    "Observation",
    "StepOutcome",
    "TextEnv",
    "TaskSpec",
    "get_task",
    "list_tasks",
    "make_env",
    "fold_seeds",
]
