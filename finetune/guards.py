"""Trainer callbacks: stop a run that diverged, and stop one on purpose after N steps.

A NaN loss poisons the adapter at the next optimizer step and zero gradients mean nothing is
learning (an empty loss mask, a frozen adapter): both abort the run with a message that
says what to change, before the optimizer touches the weights.
"""

from __future__ import annotations

import math

import torch
from transformers import TrainerCallback


class TrainingDiverged(RuntimeError):
    """Training produced a non-finite loss or gradients, or no gradient at all."""


def gradient_norm(model: torch.nn.Module) -> float | None:
    """L2 norm of the gradients of the trainable parameters (None when none has a gradient)."""
    total = None
    for p in model.parameters():
        if p.requires_grad and p.grad is not None:
            part = p.grad.detach().float().pow(2).sum()
            total = part if total is None else total + part
    return None if total is None else float(total.sqrt())


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
