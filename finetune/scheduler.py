"""The scheduler: start a round when enough new qualifying experience has arrived, and log every round.

"New" means stored in the bank after the cutoff of the last round (the newest qualifying
episode it saw), "qualifying" means SFT material (`source.qualifies_for_sft`). A round runs
build -> train -> gate -> promote for `finetune.auto_kind`; each round, finished or failed,
is one line of `<home>/finetune/rounds.jsonl`.
"""

from __future__ import annotations

import json
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from crl.finetune.rounds import FinetuneContext, gate_adapter, make_dataset, train_and_register
from crl.finetune.source import EpisodeSource, qualifies_for_sft

ROUNDS_FILE = "rounds.jsonl"
# Rounds that consumed their episodes; a failed or interrupted round leaves them for the next one.
CONSUMING = ("promoted", "rejected", "trained")


@dataclass
class RoundRecord:
    """One scheduled round, as logged."""

    round: int
    started_at: float
    trigger: dict[str, Any]
    cutoff: float
    status: str = "running"
    ended_at: float | None = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


def rounds_path(home: str | Path) -> Path:
    return Path(home) / "finetune" / ROUNDS_FILE


def read_rounds(home: str | Path) -> list[RoundRecord]:
    """Every logged round, oldest first."""
    path = rounds_path(home)
    if not path.is_file():
        return []
    return [RoundRecord(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def _append(home: str | Path, record: RoundRecord) -> None:
    path = rounds_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(asdict(record)) + "\n")


def new_qualifying(bank: EpisodeSource, ctx: FinetuneContext, since: float) -> list[Any]:
    """Episodes that qualify for SFT and were stored after `since`."""
    family = ctx.config.auto_family
    return [
        r
        for r in bank.ls(kind="episode", family=family)
        if r.created_at > since and qualifies_for_sft(r, ctx.config) is None
    ]


@dataclass
class Check:
    """What the scheduler saw: new qualifying episodes against the threshold."""

    new_episodes: int
    threshold: int
    cutoff: float
    previous_cutoff: float

    @property
    def due(self) -> bool:
        return self.new_episodes >= self.threshold


def check(ctx: FinetuneContext) -> Check:
    """Count new qualifying episodes since the last round."""
    rounds = read_rounds(ctx.home)
    since = max((r.cutoff for r in rounds if r.status in CONSUMING), default=0.0)
    with ctx.open_bank() as bank:  # type: ignore[misc]
        fresh = new_qualifying(bank, ctx, since)
    cutoff = max((r.created_at for r in fresh), default=since)
    return Check(len(fresh), ctx.config.auto_min_new_episodes, cutoff, since)


def run_round(ctx: FinetuneContext, trigger: Check) -> RoundRecord:
    """Build, train, gate and promote as `auto_kind` says; log the round whatever happens."""
    record = RoundRecord(
        round=len(read_rounds(ctx.home)) + 1,
        started_at=time.time(),
        trigger={"new_episodes": trigger.new_episodes, "threshold": trigger.threshold},
        cutoff=trigger.cutoff,
    )
    family = ctx.config.auto_family
    try:
        parent = ctx.registry.promoted(ctx.base_model)
        kinds = {"sft": ["sft"], "dpo": ["dpo"], "sft+dpo": ["sft", "dpo"]}[ctx.config.auto_kind]
        record.status = "promoted"
        for kind in kinds:
            dataset = make_dataset(ctx, kind, family=family)
            _, lineage = train_and_register(ctx, kind, dataset, from_adapter=parent if kind == "dpo" else None)
            step: dict[str, Any] = {"kind": kind, "dataset": dataset.name, "adapter": lineage.id if lineage else None}
            record.steps.append(step)
            if lineage is None:
                record.status = "interrupted"
                break
            if ctx.evaluator is None:
                record.status = "trained"
                parent = lineage.id
                continue
            decision = gate_adapter(ctx, lineage.id)
            step["gate"] = decision.model_dump()
            if decision.promoted:
                parent = lineage.id
            else:
                record.status = "rejected"
                break
    except Exception as exc:  # the round fails, the scheduler lives on; the log says why
        record.status = "failed"
        record.error = f"{type(exc).__name__}: {exc}"
        record.steps.append({"traceback": traceback.format_exc(limit=5)})
    record.ended_at = time.time()
    _append(ctx.home, record)
    return record


def maybe_run_round(ctx: FinetuneContext) -> tuple[Check, RoundRecord | None]:
    """Run a round if enough new qualifying episodes arrived (what `crl run` calls after a run)."""
    seen = check(ctx)
    if not seen.due:
        return seen, None
    return seen, run_round(ctx, seen)
