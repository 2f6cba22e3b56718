"""Hindsight relabelling: a failed episode that reached a sub-goal becomes a success of the
sub-task whose whole goal that sub-goal is.

A `keyroom/compound` failure that took the key becomes a `keyroom/key` success on the same seed:
its actions up to the step that took the key are replayed in the sub-task's own environment,
which shows the sub-task's real goal text and gives the real observations. Actions the
sub-task's start makes pointless (`take brass key` in `keyroom/door`, which starts with the key
in hand) are not accepted there; they are dropped and the rest replayed again, so the episode
holds only steps the sub-task accepts. Relabellings that do not replay to a success are
rejected with the replay's reason.
"""

from __future__ import annotations

from crl.memory.synthesis.provenance import Provenance, synthetic_episode
from crl.memory.synthesis.replay import EnvFactory, replay
from crl.memory.synthesis.report import Rejection, SynthesisResult
from crl.memory.synthesis.segments import played_actions, segment_episode
from crl.memory.synthesis.task_skills import subtask_for
from crl.memory.trajectory import Episode
from crl.tasks.registry import make_env, parse_task_name


def relabel_episode(
    episode: Episode, *, include_successes: bool = False, env_factory: EnvFactory = make_env
) -> SynthesisResult:
    """The sub-task successes hidden in `episode`, one per sub-goal it reached that has a sub-task.

    Args:
        episode: a played episode (synthetic ones are not relabelled again).
        include_successes: relabel successful episodes too (their sub-goals are sub-task
            successes as well); by default only failures are, as hindsight relabelling intends.
        env_factory: builds environments by task name.
    """
    result = SynthesisResult()
    result.report.episodes_read = 1
    if episode.source != "real" or (episode.success and not include_successes):
        return result
    own_task, _ = parse_task_name(episode.task)
    for segment in segment_episode(episode):
        if not segment.reached:
            continue
        for skill in segment.skill.split("+"):
            target = subtask_for(episode.task, skill)
            if target is None:
                detail = f"sub-goal {skill!r} of {episode.task} has no sub-task of its own"
                _reject(result, episode, f"{episode.family}/{skill}", "no-subtask", detail)
            elif parse_task_name(target)[0] != own_task:
                _relabel_prefix(result, episode, target, skill, segment.end, env_factory)
    return result


def _relabel_prefix(
    result: SynthesisResult, episode: Episode, target: str, skill: str, cut: int, env_factory: EnvFactory
) -> None:
    actions = list(played_actions(episode.steps[:cut]))
    first = replay(target, episode.seed, actions, stop_on_invalid=False, env_factory=env_factory)
    dropped = [s.action for s in first.steps if not s.valid]
    replayed = first
    if dropped:
        kept = [s.action for s in first.steps if s.valid]
        replayed = replay(target, episode.seed, kept, env_factory=env_factory)
    result.report.replay_env_steps += first.env_steps + (replayed.env_steps if dropped else 0)
    if not replayed.success:
        _reject(result, episode, target, replayed.code, replayed.reason)
        return
    provenance = Provenance(
        kind="relabel",
        parents=[episode.episode_id],
        parts=[
            {
                "episode_id": episode.episode_id,
                "task": episode.task,
                "seed": episode.seed,
                "skill": skill,
                "start": 0,
                "end": cut,
                "dropped_actions": dropped,
                "parent_goal": episode.goal,
            }
        ],
        validation=replayed.summary(),
    )
    result.episodes.append(synthetic_episode(target, episode.seed, replayed, provenance))
    result.report.relabelled += 1


def _reject(result: SynthesisResult, episode: Episode, target: str, reason: str, detail: str) -> None:
    result.reject(Rejection("relabel", target, episode.seed, reason, detail, [episode.episode_id]))


def relabel_episodes(episodes: list[Episode], **kwargs) -> SynthesisResult:
    """`relabel_episode` over several episodes, results and counts together."""
    total = SynthesisResult()
    for episode in episodes:
        total.extend(relabel_episode(episode, **kwargs))
    return total
