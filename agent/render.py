"""Readable renderings of trajectories for the terminal."""

from __future__ import annotations

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from crl.memory.trajectory import Episode


def render_episode(console: Console, episode: Episode) -> None:
    """Print an episode: header, then each step's observation, thought, action and reward."""
    outcome = "[green]success[/]" if episode.success else f"[red]{episode.status}[/]"
    console.rule(f"[bold]{episode.episode_id}[/]  {episode.task}  seed {episode.seed}  {outcome}")
    console.print(f"[bold]Goal:[/] {episode.goal}")
    console.print(
        f"[dim]model {episode.model}{' + ' + episode.adapter if episode.adapter else ''} · "
        f"{len(episode.steps)} steps · return {episode.total_return:g} · {episode.end_reason}[/]"
    )
    for step in episode.steps:
        body = Text()
        body.append(step.observation.strip() + "\n", style="white")
        if step.thought:
            body.append(f"Thought: {step.thought}\n", style="italic cyan")
        if step.valid:
            body.append(f"Action: {step.action}", style="bold yellow")
        else:
            shown = step.action or step.extra.raw_action or step.raw_output.strip()[:80]
            body.append(f"Invalid: {shown!r}", style="bold red")
        if step.reward:
            body.append(f"  reward {step.reward:g}", style="bold green")
        if step.extra.repeat:
            body.append(f"  (repeated x{step.extra.repeat})", style="magenta")
        console.print(Panel(body, title=f"step {step.index}", title_align="left", expand=True))
