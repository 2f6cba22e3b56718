"""Trainer callbacks: stop a run that diverged, and stop one on purpose after N steps.

A NaN loss poisons the adapter at the next optimizer step and zero gradients mean nothing is
learning (an empty loss mask, a frozen adapter): both abort the run with a message that
says what to change, before the optimizer touches the weights.

The callbacks subclass transformers' `TrainerCallback`, which imports torch; they are defined
on first use (`from crl.finetune.guards import TrainingGuard`), so importing this module for
`TrainingDiverged` (as the command line does) stays cheap.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from crl.finetune.errors import FinetuneError

if TYPE_CHECKING:
    import torch

CALLBACKS = ("TrainingGuard", "StopAfterSteps")


class TrainingDiverged(FinetuneError, RuntimeError):
    """Training produced a non-finite loss or gradients, or no gradient at all."""


def gradient_norm(model: torch.nn.Module) -> float | None:
    """L2 norm of the gradients of the trainable parameters (None when none has a gradient)."""
    total = None
    for p in model.parameters():
        if p.requires_grad and p.grad is not None:
            part = p.grad.detach().float().pow(2).sum()
            total = part if total is None else total + part
    return None if total is None else float(total.sqrt())


def _define_callbacks() -> dict[str, type]:
    from transformers import TrainerCallback

    class TrainingGuard(TrainerCallback):
        """Raise `TrainingDiverged` on a non-finite loss or gradient, or on all-zero gradients."""

        def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
            norm = gradient_norm(model) if model is not None else None
            step = state.global_step + 1
            if norm is None or norm == 0.0:
                raise TrainingDiverged(
                    f"all gradients are zero at step {step}: nothing is learning. The loss mask may be empty "
                    "(check the dataset with `crl dataset show`) or the adapter is not trainable."
                )
            if not math.isfinite(norm):
                raise TrainingDiverged(
                    f"the gradients became {norm} at step {step} (the loss is NaN or infinite); lower the learning "
                    f"rate (now {args.learning_rate:g}) or check the dataset for broken examples."
                )

        def on_log(self, args, state, control, logs=None, **kwargs):
            loss = (logs or {}).get("loss")
            if loss is not None and not math.isfinite(float(loss)):
                raise TrainingDiverged(
                    f"the training loss is {loss} at step {state.global_step}; lower the learning rate "
                    f"(now {args.learning_rate:g}) or check the dataset."
                )

    class StopAfterSteps(TrainerCallback):
        """End training after `steps` optimizer steps, as a kill would (checkpoints written so far remain).

        Used by tests and benchmarks to interrupt a run at a known point and resume it.
        """

        def __init__(self, steps: int):
            self.steps = steps
            self.stopped = False

        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= self.steps:
                self.stopped = True
                control.should_training_stop = True
            return control

    classes = {"TrainingGuard": TrainingGuard, "StopAfterSteps": StopAfterSteps}
    for cls in classes.values():
        cls.__module__, cls.__qualname__ = __name__, cls.__name__
    return classes


def __getattr__(name: str) -> Any:
    if name in CALLBACKS:
        globals().update(_define_callbacks())
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
