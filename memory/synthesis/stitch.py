"""Stitching: a demonstration of a compound goal joined from stored skill segments, kept only
when it replays to a success in the real environment.

For each required skill, in the task's declared order, the planner picks the best segment that
reached it and starts where the previous one ends:

1. `continues`: the segment that followed the previous one in the same real episode;
2. `same-world`: a segment played on the same world (same family knobs and seed; keyroom's
   variants share worlds) that starts at its episode's beginning (a sub-task episode), after a
   *bridge*: the moves played so far, retraced back to the starting room (moves are `go`/`move`
   plus a direction, or a bare direction); or one from the middle of a same-world episode whose
   start is at least `threshold` similar to where the previous one ends;
3. `similar`: a segment from another world whose start observation is at least `threshold`
   similar to where the previous one ends (`similarity.LEXICAL_THRESHOLD` by default).

A segment from another world (`similar`) is used only when every object its actions name (their
words after the verb, less prepositions and articles; moves exempt) is known in the target world:
named in its first observation, its first list of actions, or a stored segment of that world
(`world_words`). Such a segment replays, at best, to invalid actions (twc's "put dress pants in
laundry basket" in a world without dress pants), and replay is charged as environment steps.
Ties go to higher similarity, then fewer actions. The joined actions (bridges included) are
replayed on the target task and seed; a plan longer than the step limit (the task's, or the one
the agent plays under), or one that does not replay to a success, is rejected with its reason. A
validated stitch becomes a synthetic episode of the replayed steps.

A task that declares no sub-goal order but reports score points (`score_1` ... `score_N`, see
`task_skills`) is stitched by points: the world needs the N points its episodes report, and any
segment that gained points can stand for the next ones, so points gained in different attempts on
the same world compose (attempt A put the shirt away and stopped; attempt B, from the start, put
the coat away: A's segments, then B's). By points, any segment from the same world may follow
(a world's state is what its earlier actions made it, not its last observation, so replay
judges; one from its episode's start goes first), but not one whose scoring action, its last, the
stitch has played already. A point's segment may redo a point already gained, which
replay shows; so a plan by points that fails replay is planned again without the first part that
gained nothing there, up to `POINT_TRIES` plans per world (every replay counted). And a part may
repeat an action an earlier part made pointless (`open wardrobe` when A already opened it): as in
relabelling, a plan by points is replayed with such actions logged as invalid, and one that
reaches success that way is replayed again without them, so the demonstration holds only steps
the environment accepted (provenance lists the dropped actions).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from crl.memory.synthesis.provenance import Provenance, synthetic_episode
from crl.memory.synthesis.replay import EnvFactory, ReplayResult, replay
from crl.memory.synthesis.report import Rejection, SynthesisResult
from crl.memory.synthesis.segments import Segment
from crl.memory.synthesis.similarity import LEXICAL_THRESHOLD, Similarity, lexical_similarity, words
from crl.memory.synthesis.task_skills import declares_order, is_point, stitch_order, world_key
from crl.tasks.registry import get_task, make_env

MOVE_VERBS = ("go", "move")
OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east", "up": "down", "down": "up"}
MATCH_RANK = {"continues": 3, "same-world": 2, "similar": 1}
POINT_TRIES = 4
"""Plans tried per world when stitching by points (one when the task declares its order)."""
FUNCTION_WORDS = frozenset(
    {"a", "an", "the", "in", "into", "on", "onto", "to", "from", "with", "at", "of", "for", "out"}
)


@dataclass(frozen=True)
class StitchPart:
    """One skill of a stitch: the segment used, the bridge played before it, how it matched, and
    the sub-goal(s) it must reach in the stitch (`goal`; by default the segment's own skill, but a
    segment that gained a task's first point may gain its third in a stitch)."""

    segment: Segment
    bridge: tuple[str, ...]
    match: str
    similarity: float
    goal: str = ""

    @property
    def target(self) -> str:
        return self.goal or self.segment.skill

    @property
    def actions(self) -> list[str]:
        return [*self.bridge, *self.segment.actions]

    def to_dict(self) -> dict:
        seg = self.segment
        return {
            "segment": seg.id,
            "episode_id": seg.episode_id,
            "task": seg.task,
            "seed": seg.seed,
            "skill": seg.skill,
            "goal": self.target,
            "start": seg.start,
            "end": seg.end,
            "bridge": list(self.bridge),
            "match": self.match,
            "similarity": round(self.similarity, 4),
        }


@dataclass
class StitchPlan:
    """A proposed demonstration of `task` on `seed`: its parts, in order."""

    task: str
    seed: int
    parts: list[StitchPart]

    @property
    def actions(self) -> list[str]:
        return [a for part in self.parts for a in part.actions]

    @property
    def parents(self) -> list[str]:
        return [part.segment.episode_id for part in self.parts]


def retrace(actions: Iterable[str]) -> list[str]:
    """The moves that undo the net movement of `actions` (a back-and-forth cancels out).

    Example:
        >>> retrace(["go north", "take key", "go east", "go west", "go east"])
        ['go west', 'go south']
    """
    path: list[tuple[str, str]] = []
    for action in actions:
        move = _move(action)
        if move is None:
            continue
        if path and path[-1][1] == OPPOSITE[move[1]]:
            path.pop()
        else:
            path.append(move)
    return [f"{verb} {OPPOSITE[direction]}" for verb, direction in reversed(path)]


def _move(action: str) -> tuple[str, str] | None:
    words = action.lower().split()
    if len(words) == 1 and words[0] in OPPOSITE:
        return "go", words[0]
    if len(words) == 2 and words[0] in MOVE_VERBS and words[1] in OPPOSITE:
        return words[0], words[1]
    return None


def object_words(action: str) -> set[str]:
    """The words an action names objects with: every word after its verb, less prepositions and
    articles; none for a move (`retrace` handles those).

    Example:
        >>> sorted(object_words("put dirty T-shirt in laundry basket"))
        ['basket', 'dirty', 'laundry', 'shirt', 't']
    """
    if _move(action) is not None:
        return set()
    found = words(action)
    verb = action.lower().split()[0] if action.split() else ""
    return {w for w in found - FUNCTION_WORDS if w != verb}


def world_words(
    task: str, seed: int, segments: Iterable[Segment], first: str, actions: Iterable[str] = ()
) -> frozenset[str]:
    """Every word known to belong to one world: in its first observation `first`, its first
    admissible `actions`, and the observations and actions of the stored segments played on it."""
    world = world_key(task, seed)
    known = words(first) | {w for a in actions for w in words(a)}
    for seg in segments:
        if world_key(seg.task, seg.seed) == world:
            texts = [seg.start_observation, seg.last_observation, seg.end_observation or "", *seg.actions]
            known |= {w for t in texts for w in words(t)}
    return frozenset(known)


def foreign_objects(segment: Segment, known: frozenset[str]) -> set[str]:
    """The object words of `segment`'s actions that `known` (a world's words) lacks."""
    return {w for a in segment.actions for w in object_words(a)} - known


def plan_stitch(
    task: str,
    seed: int,
    segments: list[Segment],
    start_observation: str,
    *,
    skills: tuple[str, ...] | None = None,
    similarity: Similarity = lexical_similarity,
    threshold: float = LEXICAL_THRESHOLD,
    bridge: bool = True,
    max_steps: int | None = None,
    exclude: frozenset[str] = frozenset(),
    known: frozenset[str] | None = None,
) -> StitchPlan | Rejection:
    """The best stitch of `task` on `seed` from `segments`, or the reason there is none.

    Args:
        task: the compound task (knobs included).
        seed: the seed the stitch is for.
        segments: the stored segments to choose from (only those that reached their skill count).
        start_observation: the target's first observation (where the first skill must start).
        skills: the skills to chain; default `task_skills.stitch_order` (the declared order, else
            the sub-goals the segments from this world report).
        similarity: how alike two observation texts are (lexical by default).
        threshold: the least similarity at which a segment from another world may be used.
        bridge: retrace moves back to the start before a segment that begins at its episode's start.
        max_steps: the step limit a plan must fit (default the task's own).
        exclude: ids of segments not to use (parts that failed an earlier replay).
        known: the target world's words (`world_words`); a segment from another world naming an
            object outside them is not used. None: no such check.
    """
    world = world_key(task, seed)
    skills = skills or stitch_order(task, [s.subgoals for s in segments if world_key(s.task, s.seed) == world])
    if not skills:
        return Rejection("stitch", task, seed, "no-subtask", f"{task} declares no sub-goal order to stitch")
    points = not declares_order(task) and all(is_point(s) for s in skills)
    parts: list[StitchPart] = []
    here = start_observation
    done = 0
    while done < len(skills):
        skill, left = skills[done], len(skills) - done
        used = exclude | {p.segment.id for p in parts}
        candidates = [
            s
            for s in segments
            if s.reached
            and s.actions
            and s.id not in used
            and ((is_point(s.skill) and _gain(s) <= left) if points else s.skill == skill)
        ]
        played = [a for p in parts for a in p.actions]
        if points:
            candidates = [s for s in candidates if s.actions[-1] not in played]
        if not candidates:
            return Rejection("stitch", task, seed, "no-segment", f"no stored segment reached {skill!r}", _ids(parts))
        previous = parts[-1].segment if parts else None
        ranked, foreign = [], Counter()
        for seg in candidates:
            part = _match(seg, previous, played, here, world, similarity, threshold, bridge, points)
            absent = foreign_objects(seg, known) if part is not None and part.match == "similar" and known else set()
            if absent:
                foreign.update(absent)
            elif part is not None:
                ranked.append(part)
        if not ranked:
            best = max(similarity(here, s.start_observation) for s in candidates)
            detail = f"no segment for {skill!r} starts where the stitch is (best similarity {best:.2f} < {threshold})"
            if foreign:
                named = ", ".join(w for w, _ in foreign.most_common(3))
                detail = f"no segment for {skill!r} fits this world: those that start close enough name objects it lacks ({named})"
            return Rejection("stitch", task, seed, "no-match", detail, _ids(parts))
        part = max(ranked, key=lambda p: _rank(p, points))
        gain = _gain(part.segment) if points else 1
        if points:
            part = StitchPart(
                part.segment, part.bridge, part.match, part.similarity, "+".join(skills[done : done + gain])
            )
        parts.append(part)
        done += gain
        here = part.segment.end_text
    plan = StitchPlan(task, seed, parts)
    limit = max_steps or get_task(task).max_steps
    if len(plan.actions) > limit:
        detail = f"{len(plan.actions)} actions, over {task}'s step limit of {limit}"
        return Rejection("stitch", task, seed, "over-step-limit", detail, plan.parents)
    return plan


def _rank(part: StitchPart, points: bool) -> tuple:
    """Best first: how it matched; by points, a segment from its episode's start before one from the
    middle (its start state is the world's, not what its own episode's history made it); then
    similarity, fewer actions."""
    own_start = part.segment.from_episode_start if points else False
    return MATCH_RANK[part.match], own_start, part.similarity, -len(part.actions), part.segment.id


def _gain(segment: Segment) -> int:
    """How many sub-goals a segment reached (`score_2+score_3`: two)."""
    return len(segment.skill.split("+"))


def _ids(parts: list[StitchPart]) -> list[str]:
    return [p.segment.episode_id for p in parts]


def _match(
    seg: Segment,
    previous: Segment | None,
    played: list[str],
    here: str,
    world: tuple[str, str, int],
    similarity: Similarity,
    threshold: float,
    bridge: bool,
    points: bool = False,
) -> StitchPart | None:
    score = similarity(here, seg.start_observation)
    if previous is not None and seg.episode_id == previous.episode_id and seg.start == previous.end:
        return StitchPart(seg, (), "continues", score)
    same_world = world_key(seg.task, seg.seed) == world
    if same_world and seg.from_episode_start:
        back = tuple(retrace(played)) if bridge and played else ()
        return StitchPart(seg, back, "same-world", score)
    if score >= threshold or (same_world and points):
        return StitchPart(seg, (), "same-world" if same_world else "similar", score)
    return None


def validate_stitch(
    plan: StitchPlan, env_factory: EnvFactory = make_env, *, stop_on_invalid: bool = True
) -> tuple[ReplayResult, list[bool]]:
    """Replay `plan` on its task and seed; also say, per part, whether its skill was reached by the
    end of its actions (or by the last step replayed, when the replay stopped earlier)."""
    result = replay(plan.task, plan.seed, plan.actions, stop_on_invalid=stop_on_invalid, env_factory=env_factory)
    reached, end = [], 0
    for part in plan.parts:
        end += len(part.actions)
        upto = result.steps[:end]
        info = upto[-1].info.get("subgoals") or {} if upto else {}
        reached.append(all(info.get(s, False) for s in part.target.split("+")))
    return result, reached


def stitch(
    task: str,
    seeds: Iterable[int],
    segments: list[Segment],
    *,
    skills: tuple[str, ...] | None = None,
    similarity: Similarity = lexical_similarity,
    threshold: float = LEXICAL_THRESHOLD,
    bridge: bool = True,
    max_steps: int | None = None,
    tries: int | None = None,
    env_factory: EnvFactory = make_env,
) -> SynthesisResult:
    """Plan, replay and keep stitched demonstrations of `task`: one try per seed, or up to
    `POINT_TRIES` when stitching by points (a failed replay re-plans without the first part that
    did not reach its goal; one rejection per seed, every replay's steps counted).

    A plan that only re-plays one real episode of `task` end to end is skipped (it would copy a
    real success) and counted as rejected with reason "copies-real".

    Args:
        task: the compound task (knobs included).
        seeds: the seeds to build demonstrations for.
        segments: the stored segments to build from.
        skills, similarity, threshold, bridge, max_steps: as for `plan_stitch`.
        tries: plans replayed per seed at most (default: see above).
        env_factory: builds environments by task name.
    """
    result = SynthesisResult()
    result.report.segments = len(segments)
    result.report.segments_by_skill = dict(Counter(s.skill for s in segments if s.reached))
    for seed in seeds:
        result.report.stitches_tried += 1
        env = env_factory(task)
        try:
            first = env.reset(seed)
        finally:
            env.close()
        start = first.text
        known = world_words(task, seed, segments, start, first.admissible_actions or ())
        made = _stitch_seed(
            task, seed, segments, start, result, tries, env_factory,
            skills=skills, similarity=similarity, threshold=threshold, bridge=bridge, max_steps=max_steps, known=known,
        )  # fmt: skip
        if isinstance(made, Rejection):
            result.reject(made)
    return result


def _stitch_seed(
    task: str,
    seed: int,
    segments: list[Segment],
    start: str,
    result: SynthesisResult,
    tries: int | None,
    env_factory: EnvFactory,
    **planning,
) -> Rejection | None:
    """Plan and replay stitches on one seed until one validates (kept in `result`) or the tries
    run out (the last rejection returned)."""
    exclude: frozenset[str] = frozenset()
    attempt = 0
    while True:
        attempt += 1
        plan = plan_stitch(task, seed, segments, start, exclude=exclude, **planning)
        if isinstance(plan, StitchPlan) and _copies_real(plan):
            detail = f"the plan replays real episode {plan.parents[0]} unchanged"
            plan = Rejection("stitch", task, seed, "copies-real", detail, plan.parents)
        if isinstance(plan, Rejection):
            return plan
        by_points = any(p.goal for p in plan.parts)
        limit = tries or (POINT_TRIES if by_points else 1)
        replayed, reached = validate_stitch(plan, env_factory, stop_on_invalid=not by_points)
        result.report.replay_env_steps += replayed.env_steps
        dropped = [s.action for s in replayed.steps if not s.valid]
        if replayed.success and dropped:
            kept = [s.action for s in replayed.steps if s.valid]
            replayed = replay(task, seed, kept, env_factory=env_factory)
            result.report.replay_env_steps += replayed.env_steps
        if replayed.success:
            parts = [p.to_dict() | {"reached_in_replay": r} for p, r in zip(plan.parts, reached, strict=True)]
            validation = replayed.summary() | {"plans_tried": attempt, "dropped_actions": dropped}
            provenance = Provenance(kind="stitch", parents=plan.parents, parts=parts, validation=validation)
            result.episodes.append(synthetic_episode(task, seed, replayed, provenance))
            result.report.stitches_validated += 1
            return None
        failed = next((p.segment.id for p, r in zip(plan.parts, reached, strict=True) if not r), None)
        if attempt >= limit or failed is None:
            return Rejection("stitch", task, seed, replayed.code, replayed.reason, plan.parents)
        exclude = exclude | {failed}


def _copies_real(plan: StitchPlan) -> bool:
    first = plan.parts[0].segment
    return (
        first.source == "real"
        and world_key(first.task, first.seed) == world_key(plan.task, plan.seed)
        and first.task.split("?", 1)[0] == plan.task.split("?", 1)[0]
        and all(p.match == "continues" for p in plan.parts[1:])
        and first.start == 0
    )
