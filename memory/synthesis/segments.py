"""Skill segments: an episode cut into labelled pieces by the sub-goals its steps report.

A step's `info["subgoals"]` (name -> reached so far) marks where a skill ends: the steps from
the end of the previous piece up to the step that first reached a sub-goal are that sub-goal's
segment. Tasks that report no sub-goals but a score (`info["score"]`, else the reward) are cut
at each score increment, labelled `score_1`, `score_2`, ... Steps after the last sub-goal form
one more segment, labelled with the next sub-goal in the task's declared order (else in the
order the episode reports its sub-goals, else `UNFINISHED`), with `reached=False`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from crl.memory.synthesis.task_skills import episode_subgoals, subgoal_order
from crl.memory.trajectory import Episode, Step

UNFINISHED = "unfinished"


@dataclass(frozen=True)
class Segment:
    """The steps of one episode that achieved (or tried to achieve) one skill.

    Attributes:
        skill: the sub-goal this piece reached (or was heading for when `reached` is False).
        episode_id / task / seed / source: the episode it was cut from.
        start / end: its step range, `steps[start:end]`.
        actions: the actions it played, in order (unusable and invalid steps left out: they
            changed nothing).
        start_observation: the observation its first step acted on.
        last_observation: the observation its last step acted on.
        end_observation: the observation after its last step (the next step's), or None when the
            episode ended with it (episode logs keep no final observation).
        reached: whether the sub-goal was reached by its last step.
        episode_success: whether the episode it came from succeeded.
        subgoals: every sub-goal its episode reports, in order (a TextWorldExpress world's
            `score_1` ... `score_N`: what a stitch on that world must reach).
    """

    skill: str
    episode_id: str
    task: str
    seed: int
    source: str
    start: int
    end: int
    actions: tuple[str, ...]
    start_observation: str
    last_observation: str
    end_observation: str | None
    reached: bool
    episode_success: bool
    subgoals: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        """`<episode_id>:<start>-<end>`, unique per episode."""
        return f"{self.episode_id}:{self.start}-{self.end}"

    @property
    def from_episode_start(self) -> bool:
        """Whether it begins where its episode began (the world's starting position)."""
        return self.start == 0

    @property
    def end_text(self) -> str:
        """Where it ends, as text: the end observation, else the last one it acted on."""
        return self.end_observation if self.end_observation is not None else self.last_observation

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (for reports and provenance)."""
        return asdict(self) | {"id": self.id}


def played_actions(steps: list[Step]) -> tuple[str, ...]:
    """The actions of `steps` that reached the environment and were accepted by it."""
    return tuple(s.action for s in steps if s.valid and s.action and not s.info.get("invalid"))


def given_at_start(episode: Episode) -> set[str]:
    """Sub-goals the episode's task grants at its start: those declared before its own goal.

    Example: `keyroom/door` starts with the key, so `key` is given there.
    """
    order = subgoal_order(episode.task)
    if episode.variant not in order:
        return set()
    return set(order[: order.index(episode.variant)])


def _progress_marks(episode: Episode) -> list[list[str]]:
    """Per step, the sub-goals it reached first (declared order first, then reported order)."""
    order = subgoal_order(episode.task) or episode_subgoals(episode)
    rank = {name: i for i, name in enumerate(order)}
    reported = any(isinstance(s.info.get("subgoals"), dict) and s.info["subgoals"] for s in episode.steps)
    if reported:
        reached = given_at_start(episode)
        marks = []
        for step in episode.steps:
            now = {k for k, v in (step.info.get("subgoals") or {}).items() if v}
            new = sorted(now - reached, key=lambda k: (rank.get(k, len(rank)), k))
            reached |= now
            marks.append(new)
        return marks
    marks, best, total, increments = [], 0.0, 0.0, 0
    for step in episode.steps:
        total += step.reward
        score = float(step.info["score"]) if isinstance(step.info.get("score"), int | float) else total
        if score > best:
            best, increments = score, increments + 1
            marks.append([f"score_{increments}"])
        else:
            marks.append([])
    return marks


def _next_skill(episode: Episode, reached: list[str]) -> str:
    done = set(reached) | given_at_start(episode)
    order = subgoal_order(episode.task) or episode_subgoals(episode)
    return next((s for s in order if s not in done), UNFINISHED)


def segment_episode(episode: Episode) -> list[Segment]:
    """Cut `episode` into skill segments, in step order.

    Several sub-goals first reached by the same step make one segment labelled with their
    names joined by `+`.

    Example:
        A solved `keyroom/compound` episode gives segments `key`, `door`, `chest`, in that order.
    """
    steps = episode.steps
    segments: list[Segment] = []
    reached: list[str] = []
    start = 0
    for i, new in enumerate(_progress_marks(episode)):
        if not new:
            continue
        segments.append(_segment(episode, "+".join(new), start, i + 1, reached=True))
        reached.extend(new)
        start = i + 1
    if start < len(steps):
        segments.append(_segment(episode, _next_skill(episode, reached), start, len(steps), reached=False))
    return segments


def _segment(episode: Episode, skill: str, start: int, end: int, reached: bool) -> Segment:
    steps = episode.steps
    return Segment(
        skill=skill,
        episode_id=episode.episode_id,
        task=episode.task,
        seed=episode.seed,
        source=episode.source,
        start=start,
        end=end,
        actions=played_actions(steps[start:end]),
        start_observation=steps[start].observation,
        last_observation=steps[end - 1].observation,
        end_observation=steps[end].observation if end < len(steps) else None,
        reached=reached,
        episode_success=episode.success,
        subgoals=episode_subgoals(episode),
    )


def segment_episodes(episodes: list[Episode]) -> list[Segment]:
    """Every segment of every episode, episode by episode."""
    return [seg for episode in episodes for seg in segment_episode(episode)]
