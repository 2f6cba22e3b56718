"""The automatic mode of experience synthesis: a runner hook that synthesizes during a training run.

    hook = make_auto_synthesis(settings, bank, task)   # None unless `synthesis.auto` is on
    hooks.append(hook.on_episode_end)                  # a pass every `synthesis.every` episodes
    hook.finish()                                      # a last pass for the episodes left over

Each pass relabels the failures of the run's family not looked at before and, when the run's
task is stitchable (a compound task with a declared order, or one whose episodes report score
points), stitches it on the worlds played where it has no success yet (within `synthesis.max_steps`
when set, else the task's own step limit), and with `synthesis.mine` mines rules from the
family's statistics (`reflect.mine` settings). Every
synthetic episode is validated by replay before it is stored; the environment steps replay
costs are totalled in `report` (and in the run's `run.json` as `synthesis`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from crl.memory.synthesis.bank_pass import synthesize_bank
from crl.memory.synthesis.config import SynthesisConfig
from crl.memory.synthesis.report import SynthesisReport
from crl.memory.synthesis.task_skills import can_stitch, family_of
from crl.memory.trajectory import Episode

if TYPE_CHECKING:
    from crl.memory.bank import ExperienceBank
    from crl.memory.reflection import MiningConfig

log = logging.getLogger(__name__)


class AutoSynthesis:
    """Synthesize from a run's experience every `config.every` finished episodes."""

    def __init__(
        self,
        bank: ExperienceBank,
        task: str,
        config: SynthesisConfig,
        max_steps: int | None = None,
        mining: MiningConfig | None = None,
    ) -> None:
        self.bank = bank
        self.mining = mining
        self.task = task
        self.max_steps = max_steps
        self.family = family_of(task)
        self.config = config
        self.report = SynthesisReport()
        self.passes = 0
        self._pending = 0
        self._looked_at: set[str] = set()
        self.mining_passes = 0
        self.rules_kept = 0
        self.rule_changes = 0

    def on_episode_end(self, episode: Episode) -> None:
        """Count the finished episode; run a pass when `every` have finished since the last one."""
        if not episode.finished:
            return
        self._pending += 1
        if self._pending >= self.config.every:
            self.run_pass()

    def finish(self) -> None:
        """A last pass over the episodes finished since the previous one."""
        if self._pending:
            self.run_pass()

    def run_pass(self) -> None:
        """One synthesis pass over the bank (a failure is logged, never raised: the run goes on)."""
        self._pending = 0
        stitch_task = self.task if self.config.stitch and can_stitch(self.task) else None
        try:
            self.bank.flush()
            seen = {r.episode_id for r in self.bank.ls(kind="episode", family=self.family, source="real")}
            result = synthesize_bank(
                self.bank,
                self.family,
                relabel=self.config.relabel,
                stitch_task=stitch_task,
                skip=self._looked_at,
                similarity=self.config.similarity,
                threshold=self.config.threshold,
                max_steps=self.max_steps,
            )
        except Exception:  # noqa: BLE001 — synthesis is an extra; the run must not die of it
            log.exception("automatic synthesis failed; the run goes on without it")
            return
        self.passes += 1
        self._looked_at |= seen
        self.report = self.report + result.report
        if self.config.mine:
            self.mine_pass()

    def mine_pass(self) -> None:
        """Mine rules from the family's statistics (a failure is logged, never raised)."""
        from crl.memory.reflection import mine_rules

        try:
            mined = mine_rules(self.bank, self.family, config=self.mining, actor="synthesis:auto")
        except Exception:  # noqa: BLE001 — mining is an extra too
            log.exception("automatic rule mining failed; the run goes on without it")
            return
        self.mining_passes += 1
        self.rules_kept = len(mined.kept)
        self.rule_changes += len(mined.changes)

    def summary(self) -> dict:
        """What the run's passes made and what replay cost (for `run.json`)."""
        mined = {"mining_passes": self.mining_passes, "rules_kept": self.rules_kept, "rule_changes": self.rule_changes}
        return {"passes": self.passes} | self.report.to_dict() | (mined if self.config.mine else {})


def make_auto_synthesis(settings, bank: ExperienceBank | None, task: str) -> AutoSynthesis | None:
    """The hook for a training run with `synthesis.auto` on and a bank, else None."""
    config = getattr(settings, "synthesis", None)
    if bank is None or not isinstance(config, SynthesisConfig) or not config.auto:
        return None
    reflect = getattr(settings, "reflect", None)
    return AutoSynthesis(bank, task, config, config.max_steps, getattr(reflect, "mine", None))
