"""Stitching by score points on a real TextWorldExpress world, and the section-5 experiment on a
task without sub-tasks (`twx/twc`: phase 1 plays the task itself, several attempts per world)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

pytest.importorskip("textworld_express", reason="needs the envs extra: pip install 'complementary-rl[envs]'")

from typer.testing import CliRunner  # noqa: E402

from crl.agent.cli.main import app  # noqa: E402
from crl.agent.skills_experiment import SkillsSpec, spec_of, subtasks_of  # noqa: E402
from crl.agent.skills_report import phase1_text  # noqa: E402
from crl.memory.synthesis import provenance_of, replay, segment_episode, segment_episodes, stitch  # noqa: E402
from crl.memory.synthesis.bank_pass import stitch_seeds  # noqa: E402
from crl.memory.synthesis.stitch import foreign_objects, object_words, world_words  # noqa: E402
from crl.memory.synthesis.task_skills import can_stitch, episode_subgoals, stitch_order  # noqa: E402
from tests.test_synthesis import play  # noqa: E402

TWC = "twx/twc?numLocations=1&numItemsToPutAway=2"
SEED = 0  # a bedroom: a brown shirt and a blue T-shirt go in the wardrobe (4 points: 2 takes, 2 puts)
SHIRT = ["take clean brown shirt", "open wardrobe", "put clean brown shirt in wardrobe"]
TSHIRT = ["take clean blue T-shirt", "open wardrobe", "put clean blue T-shirt in wardrobe"]


def attempt(actions: list[str], name: str):
    return play(TWC, SEED, actions, name)


def test_the_world_is_what_the_tests_need():
    a = attempt([*SHIRT, "look around"], "a")
    assert not a.success and a.status == "truncated"
    assert episode_subgoals(a) == ("score_1", "score_2", "score_3", "score_4")
    assert a.subgoals == {"score_1": True, "score_2": True, "score_3": False, "score_4": False}
    assert not replay(TWC, SEED, SHIRT + TSHIRT).success  # the wardrobe is open already: not exact
    assert replay(TWC, SEED, SHIRT + [TSHIRT[0], TSHIRT[2]]).success


def test_score_points_segment_in_order_and_a_failure_ends_heading_for_the_next_point():
    segments = segment_episode(attempt([*SHIRT, "look around"], "a"))
    assert [(s.skill, s.reached, s.actions) for s in segments] == [
        ("score_1", True, ("take clean brown shirt",)),
        ("score_2", True, ("open wardrobe", "put clean brown shirt in wardrobe")),
        ("score_3", False, ("look around",)),
    ]
    assert all(s.subgoals == ("score_1", "score_2", "score_3", "score_4") for s in segments)


def test_a_task_without_a_declared_order_stitches_by_the_points_its_episodes_report():
    assert can_stitch(TWC) and not can_stitch("keyroom/key")
    assert stitch_order(TWC, [("score_1",), ("score_1", "score_2")]) == ("score_1", "score_2")
    assert stitch_order(TWC) == ()
    assert stitch_order("keyroom/compound", [("score_1",)]) == ("key", "door", "chest")
    a, b = attempt([*SHIRT, "look around"], "a"), attempt(["look around"], "b")
    assert stitch_seeds([a, b], TWC) == [SEED]
    assert stitch_seeds([play(TWC, SEED, SHIRT + [TSHIRT[0], TSHIRT[2]], "won")], TWC) == []


def test_points_of_two_failed_attempts_stitch_into_a_success_validated_by_replay():
    a = attempt([*SHIRT, "look around", "look around"], "a")  # the shirt, then nothing
    b = attempt(["look around", *TSHIRT, "look around"], "b")  # the T-shirt, then nothing
    assert not a.success and not b.success
    result = stitch(TWC, [SEED], segment_episodes([a, b]))
    assert result.rejected == [] and result.report.stitches_validated == 1
    (episode,) = result.episodes
    assert episode.success and episode.source == "synthetic" and episode.task == TWC
    actions = [s.action for s in episode.steps]
    assert actions == [*SHIRT, "look around", TSHIRT[0], TSHIRT[2]]
    assert all(s.valid for s in episode.steps)
    assert replay(TWC, SEED, actions).success
    provenance = provenance_of(episode)
    assert provenance.parents == ["a", "a", "b", "b"]
    assert [p["goal"] for p in provenance.parts] == ["score_1", "score_2", "score_3", "score_4"]
    assert [p["skill"] for p in provenance.parts] == ["score_1", "score_2", "score_1", "score_2"]
    assert [p["match"] for p in provenance.parts] == ["same-world", "continues", "same-world", "continues"]
    assert all(p["reached_in_replay"] for p in provenance.parts)
    assert provenance.validation["dropped_actions"] == ["open wardrobe"]
    # the replay with the pointless action logged, then the clean replay the episode is made of
    assert result.report.replay_env_steps == len(actions) + 1 + len(actions)


def test_a_stitch_that_fails_replay_is_rejected_and_counted():
    """Another world's segment that names only this world's objects passes planning; its actions in
    the wrong order (put the T-shirt away, then take it) do not replay to a success."""
    a = attempt([*SHIRT, "look around"], "a")
    segments = segment_episodes([a])
    wrong_order = ("put clean blue T-shirt in wardrobe", "take clean blue T-shirt")
    elsewhere = replace(segments[0], episode_id="elsewhere", seed=2, skill="score_1+score_2", actions=wrong_order)
    result = stitch(TWC, [SEED], [*segments, elsewhere], tries=1)
    assert result.episodes == []
    (rejection,) = result.rejected
    assert rejection.seed == SEED and rejection.reason == "no-success"
    assert rejection.parents == ["a", "a", "elsewhere"]
    assert result.report.replay_env_steps == len(SHIRT) + 2 and result.report.stitches_rejected == 1


def test_a_segment_naming_objects_the_world_lacks_is_refused_before_replay():
    a = attempt([*SHIRT, "look around"], "a")
    elsewhere = play(TWC, 2, ["take flour", "take yellow onion", "look around"], "elsewhere")  # a kitchen
    segments = segment_episodes([a, elsewhere])
    known = world_words(TWC, SEED, segments, a.steps[0].observation)
    assert [foreign_objects(s, known) for s in segments if s.episode_id == "elsewhere"][:2] == [
        {"flour"},
        {"yellow", "onion"},
    ]
    result = stitch(TWC, [SEED], segments, threshold=0.0, tries=1)  # planning accepts any start
    (rejection,) = result.rejected
    assert rejection.reason == "no-match" and "flour" in rejection.detail and "onion" in rejection.detail
    assert result.episodes == [] and result.report.replay_env_steps == 0
    assert object_words("go north") == set() and object_words("take flour") == {"flour"}


def test_the_experiment_plays_the_task_itself_when_it_has_no_sub_tasks():
    assert subtasks_of(TWC) == []
    spec = SkillsSpec(TWC, phase1=2, attempts=3)
    assert "3 attempts on each of 2 train worlds" in phase1_text(spec.__dict__)
    assert spec_of({k: v for k, v in spec.__dict__.items() if k != "attempts"}).attempts == 4  # older results
    with pytest.raises(ValueError, match="attempts"):
        SkillsSpec(TWC, attempts=0)


@pytest.mark.slow
def test_a_tiny_real_run_on_twx_writes_the_plot_table_and_results(tmp_path, crl_home, monkeypatch):
    monkeypatch.setenv("CRL_LLM__DTYPE", "bf16")
    out = tmp_path / "skills-twx"
    args = [
        "experiment", "skills", TWC, "--arms", "drrn,none,skills", "--phase1", "1", "--attempts", "2",
        "--budget", "1", "--eval-episodes", "1", "--test-episodes", "1", "--repeats", "1",
        "--drrn-steps", "20", "--drrn-eval-every", "10", "--max-steps", "4", "--out", str(out), "--json",
    ]  # fmt: skip
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert (out / "curve.png").stat().st_size > 0
    table = (out / "table.md").read_text()
    assert "2 attempts on each of 1 train worlds" in table and "step limit 4" in table
    data = json.loads((out / "results.json").read_text())
    runs = {run["arm"]: run for run in data["runs"]}
    assert set(runs) == {"drrn", "none", "skills"} and all(r["done"] for r in runs.values())
    first, second = runs["skills"]["points"]
    assert first["detail"]["phase1_steps"] == 2 * 4 or 0 < first["detail"]["phase1_steps"] <= 2 * 4
    assert first["env_steps"] == first["detail"]["phase1_steps"] + first["detail"]["replay_steps"]
    assert second["env_steps"] > first["env_steps"]
    assert first["detail"]["synthesis"]["relabelled"] == 0
    assert all(run["test"]["fold"] == "test" for run in runs.values())
    assert "| skills | compound training |" in table


def test_the_points_a_world_needs_come_from_its_steps_not_from_a_record_of_those_reached():
    a = attempt([*SHIRT, "look around"], "a")
    a.subgoals = {"score_1": True, "score_2": True}  # what a bank record rebuilds: the reached ones only
    assert episode_subgoals(a) == ("score_1", "score_2", "score_3", "score_4")
    assert stitch(TWC, [SEED], segment_episodes([a])).report.stitch_rejected == {"no-segment": 1}
