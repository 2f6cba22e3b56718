"""From an `Episode` to bank records: state texts, tags and the episode/step records.

Pure functions: the bank computes novelty against the view, journals the tags, then calls
`build_records`, which a rebuild calls again with the journalled tags to get the same records.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from crl.memory import tags
from crl.memory.config import ValueWeights
from crl.memory.purpose import given_subgoals, step_purposes
from crl.memory.records import EpisodeRecord, StepRecord, episode_record_id, state_text, step_record_id
from crl.memory.trajectory import Episode, Step
from crl.prompts.state import NO_ACTION
from crl.tasks.situations import situation_of


@dataclass
class EpisodeTags:
    """Everything about an episode that depends on the bank or the config at ingest time."""

    novelty: list[float]
    step_values: list[float]
    value: float


def episode_as_of(episode: Episode, n_steps: int, finished: bool) -> Episode:
    """`episode` as it was when `n_steps` steps were logged (and ended, if `finished`)."""
    if n_steps >= len(episode.steps) and (finished or not episode.finished):
        return episode
    ep = Episode.from_dict(episode.to_dict())
    ep.steps = ep.steps[:n_steps]
    if not finished:
        ep.status, ep.success, ep.end_reason, ep.ended_at = "running", False, "", None
        ep.total_return = float(sum(s.reward for s in ep.steps))
    return ep


def history_action(step: Step) -> str:
    """A past step as the recent-actions line shows it: its action, else the unusable reply as
    written, else `(no action)`; the same words the agent's prompt history (and so its
    retrieval query) holds, so a stored state's text is the text it was queried with.

    Example:
        >>> history_action(Step(index=0, observation="A hall.", action="", valid=False))
        '(no action)'
    """
    return step.action or step.extra.raw_action or NO_ACTION


def _history(episode: Episode, i: int, history_steps: int) -> list[str]:
    return [history_action(s) for s in episode.steps[max(0, i - history_steps) : i]] if history_steps else []


def step_texts(episode: Episode, history_steps: int) -> list[str]:
    """The state text of each step: goal, the previous `history_steps` actions, observation.

    Step i's text is the one the retriever embedded when the agent stood at step i (same goal,
    observation and recent actions), so ingest finds it in the bank's embedding cache.
    """
    return [
        state_text(episode.goal, step.observation, _history(episode, i, history_steps))
        for i, step in enumerate(episode.steps)
    ]


def episode_text(episode: Episode) -> str:
    """The text an episode is embedded by: its first state (goal and first observation)."""
    first = episode.steps[0].observation if episode.steps else ""
    return state_text(episode.goal, first, [])


def loop_erased_detours(situations: list[str]) -> set[int]:
    """The steps loop erasure removes: from each situation the episode stood in, the path jumps to the
    last step taken in that same situation, and every step skipped on the way lies on a cycle.

    Example:
        >>> sorted(loop_erased_detours(["start", "holding", "start", "corridor", "holding", "end"]))
        [0, 1]
    """
    last = {s: i for i, s in enumerate(situations)}
    detours: set[int] = set()
    i = 0
    while i < len(situations):
        j = last[situations[i]]
        detours.update(range(i, j))
        i = j + 1
    return detours


def step_detours(task: str, steps: Sequence[Step]) -> set[int]:
    """The `Step.index`es of an episode's steps that loop erasure leaves off its path, each step's
    situation read by the task's `situation` (`loop_erased_detours`)."""
    situation = situation_of(task)
    ordered = sorted(steps, key=lambda st: st.index)
    return {ordered[i].index for i in loop_erased_detours([situation(st.observation) for st in ordered])}


def compute_tags(episode: Episode, novelty: list[float], weights: ValueWeights) -> EpisodeTags:
    """Value labels of an episode and its steps, given each step's novelty."""
    rewards = [s.reward for s in episode.steps]
    sparsity = tags.reward_sparsity(rewards)
    success = bool(episode.success)
    step_values = [tags.step_value(success, r, sparsity, n, weights) for r, n in zip(rewards, novelty)]
    mean_novelty = sum(novelty) / len(novelty) if novelty else 0.0
    value = tags.episode_value(success, any(r != 0 for r in rewards), sparsity, mean_novelty, weights)
    return EpisodeTags(list(novelty), step_values, value)


def verification_of(episode: Episode) -> str | None:
    """Who verified `episode`'s outcome: 'env' for one played here, 'replay' for a synthetic episode
    whose replay in the real environment succeeded as it claims, else None (unverified)."""
    if episode.source == "real":
        return "env"
    validation = (episode.provenance or {}).get("validation") or {}
    if validation.get("replayed") and bool(validation.get("success")) == bool(episode.success):
        return "replay"
    return None


def build_records(
    episode: Episode, t: EpisodeTags, history_steps: int, now: float, unneeded: Collection[int] = ()
) -> tuple[EpisodeRecord, list[StepRecord]]:
    """The episode record and step records of `episode`, tagged with `t`, stamped `now`; the steps at
    positions `unneeded` are marked as not needed by the episode's win (`memory.synthesis.minimal`)."""
    family, variant = episode.family, episode.variant
    outcome = tags.outcome_of(episode)
    verified_by = verification_of(episode)
    rewards = [s.reward for s in episode.steps]
    mean_novelty = sum(t.novelty) / len(t.novelty) if t.novelty else 0.0
    ep_record = EpisodeRecord(
        id=episode_record_id(family, episode.episode_id),
        episode_id=episode.episode_id,
        run_id=episode.run_id,
        task=episode.task,
        family=family,
        variant=variant,
        seed=episode.seed,
        goal=episode.goal,
        model=episode.model,
        adapter=episode.adapter,
        source=episode.source if episode.source in ("real", "synthetic") else "real",
        status=episode.status,
        end_reason=episode.end_reason,
        outcome=outcome,
        success=bool(episode.success),
        total_return=float(episode.total_return),
        length=len(episode.steps),
        invalid_steps=episode.invalid_steps,
        reward_sparsity=tags.reward_sparsity(rewards),
        novelty=min(1.0, max(0.0, mean_novelty)),
        skills=tags.episode_skills(episode),
        ended_at=episode.ended_at,
        provenance=episode.provenance,
        text=episode_text(episode),
        value=t.value,
        verified=verified_by is not None,
        verified_by=verified_by,
        created_at=episode.started_at,
        updated_at=now,
        trajectory=[s.to_dict() for s in episode.steps],
    )
    steps = []
    skills = tags.step_skills(episode.steps, given_subgoals(episode.task))
    purposes = step_purposes(episode.task, [s.info for s in episode.steps])
    subgoal_in: list[int | None] = [None] * len(skills)
    following: int | None = None
    for i in range(len(skills) - 1, -1, -1):
        following = i if skills[i] else following
        subgoal_in[i] = None if following is None else following - i
    seen: set[tuple[str, str]] = set()
    situation = situation_of(episode.task)
    situations = [situation(step.observation) for step in episode.steps]
    detours = loop_erased_detours(situations)
    for i, step in enumerate(episode.steps):
        pair = (situations[i], step.action)
        repeated = pair in seen
        seen.add(pair)
        steps.append(
            StepRecord(
                id=step_record_id(family, episode.episode_id, i),
                episode_id=episode.episode_id,
                run_id=episode.run_id,
                task=episode.task,
                family=family,
                variant=variant,
                seed=episode.seed,
                index=i,
                goal=episode.goal,
                observation=step.observation,
                history=_history(episode, i, history_steps),
                action=step.action,
                thought=step.thought,
                valid=step.valid,
                reward=float(step.reward),
                done=step.done,
                skills=skills[i],
                episode_outcome=outcome,
                episode_return=float(episode.total_return),
                novelty=t.novelty[i],
                value=t.step_values[i],
                source=ep_record.source,
                verified=ep_record.verified,
                verified_by=ep_record.verified_by,
                model=episode.model,
                adapter=episode.adapter,
                episode_length=len(episode.steps),
                repeated=repeated,
                detour=i in detours,
                unneeded=i in unneeded,
                subgoal_in=subgoal_in[i],
                purpose=purposes[i][0],
                purpose_in=purposes[i][1],
                created_at=step.time,
                updated_at=now,
            )
        )
    return ep_record, steps
