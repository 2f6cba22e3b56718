"""The experience synthesizer on real keyroom episodes: segments, relabelling, stitching by replay."""

from __future__ import annotations

import json

import numpy as np
import pytest

from crl.memory.synthesis import (
    Provenance,
    SynthesisReport,
    plan_stitch,
    provenance_of,
    relabel_episode,
    replay,
    segment_episode,
    segment_episodes,
    stitch,
    synthesize,
)
from crl.memory.synthesis.bank_io import episodes_from_bank, store_synthetic
from crl.memory.synthesis.report import Rejection
from crl.memory.synthesis.similarity import (
    EMBEDDING_THRESHOLD,
    LEXICAL_THRESHOLD,
    lexical_similarity,
    similarity_named,
)
from crl.memory.synthesis.stitch import retrace
from crl.memory.trajectory import Episode, Step
from crl.tasks.keyroom import solve
from crl.tasks.registry import make_env
from tests.retrieval_fixtures import open_test_bank

KNOBS = "?n_rooms=3"
COMPOUND, KEY, DOOR, CHEST = (f"keyroom/{v}{KNOBS}" for v in ("compound", "key", "door", "chest"))
SEED = 3  # the key lies away from the start room: sub-task demonstrations need a bridge back
OTHER_SEED = 4  # another world, with another key (checked in `test_fixture_worlds_are_what_the_tests_need`)


def play(task: str, seed: int, actions: list[str], episode_id: str | None = None) -> Episode:
    """An episode logged the way the agent logs one, played through the real environment."""
    env = make_env(task)
    obs = env.reset(seed)
    episode = Episode(episode_id or f"{task}-{seed}", "fixture-run", task, seed, obs.goal, model="scripted")
    for i, action in enumerate(actions):
        out = env.step(action)
        episode.steps.append(
            Step(
                index=i,
                observation=obs.text,
                action=action,
                admissible_actions=obs.admissible_actions,
                valid=not out.info["invalid"],
                reward=out.reward,
                done=out.done,
                info=out.info,
                decided_by="scripted",
            )
        )
        obs = out.observation
        if out.done:
            break
    last = episode.steps[-1]
    episode.status = "done" if last.done else "truncated"
    episode.success = bool(last.info["success"])
    episode.subgoals = dict(last.info["subgoals"])
    episode.total_return = sum(s.reward for s in episode.steps)
    return episode


def solved(variant: str, seed: int = SEED) -> Episode:
    task = f"keyroom/{variant}{KNOBS}"
    return play(task, seed, solve(seed, variant, n_rooms=3), f"{variant}-{seed}")


def sub_task_segments(seed: int) -> list:
    return segment_episodes([solved(v, seed) for v in ("key", "door", "chest")])


def key_name(seed: int) -> str:
    env = make_env(COMPOUND)
    env.reset(seed)
    return env.world.key_name


def test_fixture_worlds_are_what_the_tests_need():
    env = make_env(COMPOUND)
    env.reset(SEED)
    assert env.world.key_room != env.world.start_room
    assert key_name(SEED) != key_name(OTHER_SEED)


# ---- segments ------------------------------------------------------------------------------


def test_a_solved_compound_episode_segments_into_key_door_chest_in_order():
    episode = solved("compound")
    segments = segment_episode(episode)
    assert [s.skill for s in segments] == ["key", "door", "chest"]
    assert all(s.reached for s in segments)
    assert [(s.start, s.end) for s in segments][0][0] == 0
    assert all(a.end == b.start for a, b in zip(segments, segments[1:], strict=False))
    assert segments[-1].end == len(episode.steps)
    assert [a for s in segments for a in s.actions] == solve(SEED, "compound", n_rooms=3)
    assert segments[0].actions[-1] == f"take {key_name(SEED)}"
    assert segments[1].actions[-1] == "open door" and segments[2].actions[-1] == "take treasure"
    door = segments[1]
    assert door.start_observation == episode.steps[door.start].observation
    assert door.end_observation == episode.steps[door.end].observation == segments[2].start_observation
    assert segments[-1].end_observation is None and segments[-1].end_text == episode.steps[-1].observation
    assert (door.episode_id, door.task, door.seed) == (episode.episode_id, COMPOUND, SEED)


def test_a_failure_ends_with_an_unreached_segment_for_the_next_skill():
    actions = solve(SEED, "key", n_rooms=3) + ["look", "inventory"]
    segments = segment_episode(play(COMPOUND, SEED, actions))
    assert [(s.skill, s.reached) for s in segments] == [("key", True), ("door", False)]
    assert segments[1].actions == ("look", "inventory")


def test_a_sub_task_episode_does_not_count_the_sub_goals_it_starts_with():
    segments = segment_episode(solved("door"))
    assert [(s.skill, s.reached) for s in segments] == [("door", True)]


def test_invalid_steps_are_kept_in_the_range_but_not_in_the_actions():
    actions = ["dance", *solve(SEED, "key", n_rooms=3)]
    (segment,) = segment_episode(play(KEY, SEED, actions))
    assert (segment.start, segment.end) == (0, len(actions))
    assert segment.actions == tuple(solve(SEED, "key", n_rooms=3))


def test_score_increments_label_segments_when_no_sub_goals_are_reported():
    scores = [0, 1, 1, 3, 3]
    steps = [Step(i, f"obs {i}", f"act {i}", info={"score": s}) for i, s in enumerate(scores)]
    episode = Episode("e", "r", "somegame/level", 0, "win", steps=steps)
    segments = segment_episode(episode)
    assert [(s.skill, s.start, s.end, s.reached) for s in segments] == [
        ("score_1", 0, 2, True),
        ("score_2", 2, 4, True),
        ("unfinished", 4, 5, False),
    ]


# ---- relabelling ---------------------------------------------------------------------------


def test_a_failed_compound_episode_that_took_the_key_becomes_a_keyroom_key_success():
    key_actions = solve(SEED, "key", n_rooms=3)
    parent = play(COMPOUND, SEED, key_actions + ["look", "inventory"], "compound-failure")
    assert not parent.success
    result = relabel_episode(parent)
    assert result.rejected == [] and result.report.relabelled == 1
    (episode,) = result.episodes
    assert (episode.task, episode.seed, episode.source, episode.status) == (KEY, SEED, "synthetic", "done")
    assert episode.success and episode.total_return == 1.0
    assert episode.goal == make_env(KEY).reset(SEED).goal != parent.goal
    assert [s.action for s in episode.steps] == key_actions
    assert [s.observation for s in episode.steps] == [s.observation for s in parent.steps[: len(key_actions)]]
    assert episode.episode_id.startswith("syn-relabel-")
    provenance = provenance_of(episode)
    assert provenance.kind == "relabel" and provenance.parents == ["compound-failure"]
    assert provenance.parts[0]["skill"] == "key" and provenance.parts[0]["end"] == len(key_actions)
    assert provenance.validation["success"] is True and provenance.validation["replayed"] is True
    assert relabel_episode(parent).episodes[0].episode_id == episode.episode_id  # stable: stored once


def test_relabelling_to_door_drops_the_actions_the_sub_task_start_makes_pointless():
    door_actions = solve(SEED, "compound", n_rooms=3)[:-3]  # key and door, not the chest
    parent = play(COMPOUND, SEED, door_actions + ["look"], "door-failure")
    assert parent.subgoals == {"key": True, "door": True, "chest": False}
    result = relabel_episode(parent)
    assert [e.task for e in result.episodes] == [KEY, DOOR]
    door = result.episodes[1]
    take_key = f"take {key_name(SEED)}"
    assert [s.action for s in door.steps] == [a for a in door_actions if a != take_key]
    assert all(s.valid for s in door.steps) and door.success
    assert provenance_of(door).parts[0]["dropped_actions"] == [take_key]
    assert replay(DOOR, SEED, [s.action for s in door.steps]).success


def test_successes_and_synthetic_episodes_are_not_relabelled():
    assert relabel_episode(solved("compound")).episodes == []
    assert len(relabel_episode(solved("compound"), include_successes=True).episodes) == 3
    failure = play(COMPOUND, SEED, solve(SEED, "key", n_rooms=3))
    failure.source = "synthetic"
    assert relabel_episode(failure).episodes == []


# ---- stitching -----------------------------------------------------------------------------


def test_sub_task_successes_of_one_seed_stitch_into_a_compound_success_by_replay():
    segments = sub_task_segments(SEED)
    result = stitch(COMPOUND, [SEED], segments)
    assert result.rejected == []
    assert (result.report.stitches_tried, result.report.stitches_validated) == (1, 1)
    (episode,) = result.episodes
    assert episode.success and episode.source == "synthetic" and episode.task == COMPOUND
    assert episode.goal == make_env(COMPOUND).reset(SEED).goal
    assert episode.subgoals == {"key": True, "door": True, "chest": True}
    fresh = play(COMPOUND, SEED, [s.action for s in episode.steps])
    assert fresh.success
    assert [s.observation for s in episode.steps] == [s.observation for s in fresh.steps]
    provenance = provenance_of(episode)
    assert provenance.kind == "stitch"
    assert provenance.parents == [f"{v}-{SEED}" for v in ("key", "door", "chest")]
    assert [p["skill"] for p in provenance.parts] == ["key", "door", "chest"]
    assert provenance.parts[0]["bridge"] == [] and provenance.parts[1]["bridge"]  # back to the start room
    assert all(p["reached_in_replay"] for p in provenance.parts)
    assert provenance.validation["success"] is True
    assert result.report.replay_env_steps == len(episode.steps)


def test_the_same_stitch_without_its_bridge_fails_replay_and_is_rejected_with_the_reason():
    result = stitch(COMPOUND, [SEED], sub_task_segments(SEED), bridge=False)
    assert result.episodes == []
    (rejection,) = result.rejected
    assert rejection.reason == "invalid-action" and "unlock door" in rejection.detail
    assert rejection.parents == [f"{v}-{SEED}" for v in ("key", "door", "chest")]
    assert result.report.stitch_rejected == {"invalid-action": 1} and result.report.stitches_rejected == 1


def test_segments_from_another_world_naming_its_own_key_are_refused_before_replay():
    """Another keyroom world holds another key: its segments could only replay to invalid actions,
    so planning refuses them and nothing is replayed (a stitch that passes planning but fails replay
    is tested on twc, tests/test_skills_twx.py)."""
    segments = sub_task_segments(OTHER_SEED)
    result = stitch(COMPOUND, [SEED], segments, threshold=0.0)  # planning accepts any start
    assert result.episodes == []
    (rejection,) = result.rejected
    assert rejection.reason == "no-match" and rejection.seed == SEED
    assert key_name(OTHER_SEED).split()[0] in rejection.detail and result.report.replay_env_steps == 0
    strict = stitch(COMPOUND, [SEED], segments, threshold=1.01)
    assert [r.reason for r in strict.rejected] == ["no-match"] and strict.report.replay_env_steps == 0


def test_a_stitch_that_would_copy_a_real_episode_is_not_made():
    result = stitch(COMPOUND, [SEED], segment_episode(solved("compound")))
    assert result.episodes == [] and [r.reason for r in result.rejected] == ["copies-real"]
    assert result.report.replay_env_steps == 0


def test_plans_over_the_step_limit_or_without_segments_are_rejected_before_replay():
    dawdling_key = play(KEY, SEED, ["look"] * 20 + solve(SEED, "key", n_rooms=3), "slow-key")
    segments = segment_episodes([dawdling_key, solved("door"), solved("chest")])
    start = make_env(COMPOUND).reset(SEED).text
    over = plan_stitch(COMPOUND, SEED, segments, start)
    assert isinstance(over, Rejection) and over.reason == "over-step-limit"
    missing = plan_stitch(COMPOUND, SEED, segment_episodes([solved("key")]), start)
    assert isinstance(missing, Rejection) and missing.reason == "no-segment" and "door" in missing.detail


def test_the_planner_prefers_a_segment_that_continues_the_previous_ones_episode():
    failure = play(COMPOUND, SEED, solve(SEED, "compound", n_rooms=3)[:-3] + ["look"], "door-failure")
    segments = segment_episodes([failure, solved("door"), solved("chest")])
    plan = plan_stitch(COMPOUND, SEED, segments, make_env(COMPOUND).reset(SEED).text)
    assert [p.match for p in plan.parts] == ["same-world", "continues", "same-world"]
    assert plan.parts[1].segment.episode_id == "door-failure" and plan.parts[2].segment.episode_id == f"chest-{SEED}"
    assert replay(COMPOUND, SEED, plan.actions).success


def test_retrace_undoes_net_movement():
    assert retrace(["go north", "take key", "go east", "go west", "go east"]) == ["go west", "go south"]
    assert retrace(["move north", "north"]) == ["go south", "move south"]
    assert retrace(["look"]) == []


def test_lexical_similarity():
    assert lexical_similarity("You are in the hall.", "you are in the HALL") == 1.0
    assert lexical_similarity("a b", "c d") == 0.0


def test_similarity_named_gives_each_its_measured_threshold():
    axes = {"hall": [1.0, 0.0], "kitchen": [0.6, 0.8]}

    def embed(texts):
        return np.array([axes[t] for t in texts])

    lexical, lexical_threshold = similarity_named("lexical")
    assert lexical is lexical_similarity and lexical_threshold == LEXICAL_THRESHOLD == 0.6
    cosine, embedding_threshold = similarity_named("embedding", embed)
    assert embedding_threshold == EMBEDDING_THRESHOLD == 0.75
    assert cosine("hall", "kitchen") == pytest.approx(0.6) and cosine("hall", "hall") == pytest.approx(1.0)
    with pytest.raises(ValueError, match="needs an embedding function"):
        similarity_named("embedding")
    with pytest.raises(ValueError, match="lexical, embedding"):
        similarity_named("cosine")


# ---- the pass, the report, provenance in storage -------------------------------------------


def test_synthesize_counts_what_it_made_and_turned_down():
    failure = play(COMPOUND, SEED, solve(SEED, "key", n_rooms=3) + ["look"], "compound-failure")
    played = [failure, solved("key"), solved("door"), solved("chest")]
    result = synthesize(played, stitch_task=COMPOUND, stitch_seeds=[SEED, OTHER_SEED])
    report = result.report
    assert report.episodes_read == 4 and report.segments == 5
    assert report.segments_by_skill == {"key": 2, "door": 1, "chest": 1}
    assert report.relabelled == 1 and report.stitches_tried == 2 and report.stitches_validated == 1
    assert report.stitches_rejected == 1
    assert [e.task for e in result.episodes] == [KEY, COMPOUND]
    assert len(result.rejected) == 1 and result.rejected[0].seed == OTHER_SEED
    assert any("validated" in line for line in report.lines())
    json.dumps(report.to_dict())


def test_reports_add_up():
    a = SynthesisReport(segments=2, stitches_tried=1, stitch_rejected={"no-match": 1})
    b = SynthesisReport(segments=3, stitches_tried=2, stitches_validated=1, stitch_rejected={"no-match": 1})
    total = a + b
    assert (total.segments, total.stitches_tried, total.stitches_validated) == (5, 3, 1)
    assert total.stitch_rejected == {"no-match": 2} and total.stitches_rejected == 2


def test_provenance_survives_the_episode_log_round_trip():
    (episode,) = stitch(COMPOUND, [SEED], sub_task_segments(SEED)).episodes
    again = Episode.from_dict(json.loads(json.dumps(episode.to_dict())))
    assert provenance_of(again) == provenance_of(episode)
    assert isinstance(provenance_of(again), Provenance) and provenance_of(solved("key")) is None


def test_synthetic_episodes_are_stored_in_the_bank_and_read_back(tmp_path):
    (episode,) = stitch(COMPOUND, [SEED], sub_task_segments(SEED)).episodes
    bank = open_test_bank(tmp_path)
    try:
        with pytest.raises(ValueError, match="synthetic episodes only"):
            store_synthetic(bank, [solved("key")])
        (stored,) = store_synthetic(bank, [episode])
        assert stored.skipped is None and stored.new_steps == len(episode.steps)
        assert store_synthetic(bank, [episode])[0].skipped == "already stored"
        assert episodes_from_bank(bank, "keyroom") == []
        (back,) = episodes_from_bank(bank, "keyroom", source="synthetic")
        assert back.episode_id == episode.episode_id and back.success
        assert [s.action for s in back.steps] == [s.action for s in episode.steps]
        assert provenance_of(back) == provenance_of(episode)
    finally:
        bank.close()
