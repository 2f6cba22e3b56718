"""What the reflector reflects on: pairs, groups and lone failures, chosen from stored episodes.

Three kinds of input, each one prompt:

    pair      a failure and a success on the same task (the same game when one exists,
              else the same variant): the contrast says what mattered
    group     up to `group_size` successes on the same task: what they share
    critique  failures of one game (task and seed) with no success on that task yet: a
              Reflexion-style self-critique whose rules are kept for retries of that game

Choice, oldest first so nothing waits forever: every failure not yet paired gets the
latest success of its task as partner; failures with no partner and no critique yet are
critiqued per game; successes not yet in a group are grouped per task (a lone success
waits for a second). Pairs come first, then groups, then critiques (the reflector takes
at most `max_inputs` of them per run; the rest wait for the next).
A failure critiqued earlier is still paired once a success arrives. Quarantined,
unfinished and errored episodes are never chosen, nor (with `verified_only`) an episode that
claims success the environment did not verify. With `strip_instructions`, `episode_text`
replaces instruction-like spans before the reflector reads them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from crl.memory.records import EpisodeRecord
from crl.memory.reflection.config import ReflectorConfig
from crl.memory.reflection.rule_editor import RuleTarget
from crl.memory.retrieval.influence import claims_success, counts_as_success
from crl.prompts.untrusted import instruction_spans, strip_instructions


def planted_instructions(records: Iterable[EpisodeRecord]) -> list[str]:
    """The instruction-like spans (`prompts.untrusted.instruction_spans`) in the goals, observations
    and actions of `records`: what a rule must not come from."""
    found: list[str] = []
    for record in records:
        texts = [record.goal] + [f"{s.observation}\n{s.action}\n{s.raw_output or ''}" for s in record.trajectory]
        for text in texts:
            found += [span.text(text) for span in instruction_spans(text)]
    return found


InputKind = Literal["pair", "group", "critique"]


@dataclass
class ReflectionInput:
    """One reflection's material: its kind, the task, and the episodes (with trajectories).

    A pair holds [failure, success]; a group, successes; a critique, failures of one game.
    """

    kind: InputKind
    task: str
    episodes: list[EpisodeRecord]

    @property
    def family(self) -> str:
        return self.task.split("/", 1)[0]

    @property
    def variant(self) -> str | None:
        name = self.task.split("?", 1)[0]
        return name.split("/", 1)[1] if "/" in name else None

    @property
    def episode_ids(self) -> list[str]:
        """Record ids of the episodes, in order (the rules' provenance)."""
        return [e.id for e in self.episodes]

    def target(self, rule_scope: str = "family") -> RuleTarget:
        """Where rules written from this input go: one game for a critique, else the family
        (or the variant, with `rule_scope = "variant"`)."""
        if self.kind == "critique":
            return RuleTarget(self.family, self.variant, self.episodes[0].seed if self.episodes else None)
        return RuleTarget(self.family, self.variant if rule_scope == "variant" else None)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "task": self.task, "episodes": self.episode_ids}


@dataclass
class ReflectedSoFar:
    """Which episodes earlier reflections used, and in what role (read back from the reflection log)."""

    paired: set[str] = field(default_factory=set)
    critiqued: set[str] = field(default_factory=set)
    grouped: set[str] = field(default_factory=set)

    def note(self, item: ReflectionInput) -> None:
        """Remember that `item` was reflected on."""
        self.note_ids(item.kind, item.episode_ids)

    def note_ids(self, kind: str, ids: Sequence[str]) -> None:
        if kind == "pair" and ids:
            self.paired.add(ids[0])
        elif kind == "critique":
            self.critiqued.update(ids)
        elif kind == "group":
            self.grouped.update(ids)


def reflectable(record: EpisodeRecord, verified_only: bool = False) -> bool:
    """Whether an episode may be reflected on: finished, not errored, not quarantined (and, with
    `verified_only`, not a success the environment did not verify: `influence.counts_as_success`)."""
    if verified_only and claims_success(record) and not counts_as_success(record):
        return False
    return record.tier != "quarantine" and record.outcome in ("success", "failure") and record.status != "error"


def select_inputs(
    episodes: Iterable[EpisodeRecord], done: ReflectedSoFar, config: ReflectorConfig
) -> list[ReflectionInput]:
    """Every reflection due for `episodes`, in the order to take them (see the module docstring)."""
    eligible = sorted((e for e in episodes if reflectable(e, config.verified_only)), key=lambda e: (e.created_at, e.id))
    successes: dict[str, list[EpisodeRecord]] = {}
    for e in eligible:
        if e.success:
            successes.setdefault(e.task, []).append(e)
    pairs: list[ReflectionInput] = []
    lone: dict[tuple[str, int], list[EpisodeRecord]] = {}
    for f in (e for e in eligible if not e.success):
        if f.id in done.paired:
            continue
        partners = successes.get(f.task, [])
        if partners:
            same_game = [s for s in partners if s.seed == f.seed]
            pairs.append(ReflectionInput("pair", f.task, [f, (same_game or partners)[-1]]))
        elif config.self_critique and f.id not in done.critiqued:
            lone.setdefault((f.task, f.seed), []).append(f)
    groups: list[ReflectionInput] = []
    for task, items in successes.items():
        fresh = [s for s in items if s.id not in done.grouped]
        for start in range(0, len(fresh), config.group_size):
            chunk = fresh[start : start + config.group_size]
            if len(chunk) >= 2:
                groups.append(ReflectionInput("group", task, chunk))
    critiques = [ReflectionInput("critique", task, fails[-config.group_size :]) for (task, _), fails in lone.items()]
    return pairs + groups + critiques


def _flat(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def episode_text(
    record: EpisodeRecord, max_steps: int = 12, max_observation_chars: int = 160, strip: bool = False
) -> str:
    """An episode as the reflector reads it: goal, each observation and the action taken, the end.

    With `strip`, instruction-like spans of the goal, observations and actions are replaced
    first (`prompts.untrusted.strip_instructions`), so a command planted in an observation is
    never in the reflector's prompt; the cut to `max_observation_chars` comes after, so the
    span cannot be cut in half and slip through. Long episodes keep their first and last steps.
    Example output:

        Goal: Find the copper key and take it.
        1. You are in the study. You see a copper key. -> take copper key (reward 1)
        Result: success in 1 step.
    """
    clean = strip_instructions if strip else str
    lines = [f"Goal: {_flat(clean(record.goal), 2 * max_observation_chars)}"]
    steps = list(record.trajectory)
    shown: list[Any] = steps
    if len(steps) > max_steps:
        head = max_steps // 2
        shown = steps[:head] + [None] + steps[len(steps) - (max_steps - head) :]
    for step in shown:
        if step is None:
            lines.append(f"... ({len(steps) - max_steps} steps left out) ...")
            continue
        if step.valid and step.action:
            did = clean(step.action)
        else:
            did = f"(invalid reply: {_flat(clean(step.raw_output or step.action), 60)!r})"
        reward = f" (reward {step.reward:g})" if step.reward else ""
        lines.append(f"{step.index + 1}. {_flat(clean(step.observation), max_observation_chars)} -> {did}{reward}")
    n = record.length
    if record.success:
        lines.append(f"Result: success in {n} step{'s' if n != 1 else ''}.")
    else:
        why = record.end_reason or record.status
        reached = ", ".join(record.skills) or "none"
        lines.append(f"Result: failure after {n} step{'s' if n != 1 else ''} ({why}; sub-goals reached: {reached}).")
    return "\n".join(lines)
