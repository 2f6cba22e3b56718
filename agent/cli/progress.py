"""A rich progress bar for episodes: done/total, success rate so far, steps per second."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.console import Console

if TYPE_CHECKING:
    from crl.memory.trajectory import Episode


class EpisodeProgress:
    """Implements the runner's `Progress` protocol by drawing a bar on `console`."""

    def __init__(self, total: int, console: Console, initial: int = 0, description: str = "episodes"):
        self.total = total
        self.successes = 0
        self.finished = 0
        self.steps = 0
        self._t0 = time.monotonic()
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("success {task.fields[rate]}"),
            TextColumn("{task.fields[sps]} steps/s"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self._task = self._bar.add_task(description, total=total, completed=initial, rate="-", sps="-")

    def __enter__(self) -> "EpisodeProgress":
        self._bar.start()
        return self

    def __exit__(self, *exc) -> None:
        self._bar.stop()

    def episode_done(self, episode: Episode) -> None:
        """One episode finished: advance the bar and update the success rate."""
        self.finished += 1
        self.successes += int(episode.success)
        self._bar.update(self._task, advance=1, rate=f"{self.successes / self.finished:.0%}")

    def point_done(self, arm: str, rate: float) -> None:
        """One evaluation point of a learning curve."""
        self._bar.update(self._task, advance=1, rate=f"{arm} {rate:.0%}")

    def steps_done(self, n: int) -> None:
        """`n` more environment steps were taken: update the steps per second."""
        self.steps += n
        sps = self.steps / max(time.monotonic() - self._t0, 1e-9)
        self._bar.update(self._task, sps=f"{sps:.2f}")
