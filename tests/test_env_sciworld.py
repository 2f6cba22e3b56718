"""ScienceWorld behind `TextEnv`, run for real on its Java engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("scienceworld", reason="needs the envs extra: pip install 'complementary-rl[envs]'")

from crl.tasks.base import FOLDS  # noqa: E402
from crl.tasks.registry import get_task, make_env  # noqa: E402
from crl.tasks.sciworld import TASKS, SciWorldEnv, action_hint, parse_subgoals  # noqa: E402

pytestmark = pytest.mark.slow  # one JVM start plus task loads: several seconds


@pytest.fixture(scope="module")
def env():
    env = make_env("sciworld/find-living-thing")
    yield env
    env.close()


def run_isolated(script: str) -> dict:
    """Run `script` in a fresh interpreter at the repo root; it prints one JSON object last."""
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_all_engine_tasks_are_registered_with_its_variation_splits(env):
    env.reset(0)
    raw = env.engine.handle
    assert sorted(raw.get_task_names()) == sorted(TASKS) and len(TASKS) == 30
    for name, task in TASKS.items():
        raw.load(name, 0, "")
        spec = get_task(f"sciworld/{name}")
        engine = {
            "train": raw.get_variations_train(),
            "dev": raw.get_variations_dev(),
            "test": raw.get_variations_test(),
        }
        assert {fold: list(spec.folds.get(fold)) for fold in FOLDS} == engine, name
        assert spec.max_steps == task.max_steps > 0 and spec.description


def test_reset_gives_goal_and_a_compact_action_block_instead_of_admissible_actions(env):
    obs = env.reset(0)
    assert obs.admissible_actions is None
    assert "living thing" in obs.goal and not obs.goal.startswith("Task Description")
    assert obs.text.startswith("This room is called the hallway")
    assert "Actions you can use (OBJ is an object here): " in obs.text and "focus on OBJ" in obs.text
    assert "reset task" not in obs.text and "Objects here: agent, air" in obs.text
    assert len(obs.text) < 2000
    assert env.reset(0) == obs


def test_valid_inadmissible_ambiguous_and_fuzzy_actions(env):
    env.reset(0)
    outcome = env.step("xyzzy")
    assert outcome.info["invalid"] and outcome.info["action"] is None and outcome.reward == 0.0
    assert outcome.observation.text.startswith("Nothing happens: 'xyzzy' is not a valid action here.")
    assert env.step("reset task").info["invalid"]
    outcome = env.step("Look at the picture.")
    assert not outcome.info["invalid"] and outcome.observation.text.startswith("a picture")
    assert env.step("look at teh picture").info["action"] == "look at picture"  # close spelling
    outcome = env.step("open door")  # six doors: the engine asks which, the first is taken
    assert not outcome.info["invalid"] and outcome.info["action"].startswith("open door between")
    assert "The door is now open." in outcome.observation.text
    assert outcome.info["score"] > 0 and outcome.reward == pytest.approx(outcome.info["score"] / 100)
    assert env.step("focus on pictur").info["invalid"]  # never guessed: focusing is irreversible
    assert set(outcome.info) >= {"success", "won", "subgoals", "invalid", "action", "score"}


def test_gold_path_reaches_success_with_subgoals(env):
    for seed in (0, 160, 230):  # one variation from each fold
        env.reset(seed)
        total = 0.0
        for action in env.gold_actions():
            obs, reward, done, info = env.step(action)
            total += reward
            if done:
                break
        assert done and info["success"] and info["won"] and info["score"] == 100, seed
        assert total == pytest.approx(1.0)
        assert info["subgoals"] == {"focus on a living thing": True, "move living thing to answer box": True}
        with pytest.raises(RuntimeError, match="episode is over"):
            env.step("look around")


def test_gold_path_of_a_longer_task_and_the_gold_path_knob():
    boil = SciWorldEnv("boil", gold_path=1)
    try:
        boil.reset(21)  # a test-fold variation
        infos = []
        for action in boil.gold_actions():  # gold paths may go on after the win
            infos.append(boil.step(action).info)
            if boil.done:
                break
        assert infos[-1]["success"] and infos[-1]["score"] == 100
        reached = [sum(info["subgoals"].values()) for info in infos]
        assert reached == sorted(reached) and reached[-1] == len(infos[-1]["subgoals"]) >= 3
    finally:
        boil.close()


def test_focusing_on_the_wrong_thing_fails_the_episode(env):
    env.reset(0)
    obs, reward, done, info = env.step("focus on picture")
    assert done and info["lost"] and not info["success"] and info["score"] < 0 and reward < 0


def test_gold_actions_need_a_fresh_episode_without_the_knob(env):
    env.reset(1)
    env.step("look around")
    with pytest.raises(RuntimeError, match="right after"):
        env.gold_actions()


def test_seeds_are_variations_and_bad_seeds_are_refused(env):
    spec = get_task("sciworld/find-living-thing")
    train, dev, test = (set(spec.folds.get(f)) for f in FOLDS)
    assert not (train & dev or train & test or dev & test)
    assert len(train | dev | test) == TASKS["find-living-thing"].n_variations
    assert env.reset(3) != env.reset(4)
    with pytest.raises(ValueError, match="variations 0-299"):
        env.reset(300)


def test_simplifications_knob_changes_the_game():
    easy = make_env("sciworld/find-living-thing?simplifications=easy")
    try:
        obs = easy.reset(0)
        assert "(that is open)" in obs.text and "teleport OBJ" in obs.text
    finally:
        easy.close()
    with pytest.raises(ValueError, match="Unknown simplification"):
        bad = make_env("sciworld/boil?simplifications=nonsense")
        try:
            bad.reset(0)
        finally:
            bad.close()


def test_action_hint_caps_the_object_list():
    hint = action_hint(["open OBJ"], [f"object number {i}" for i in range(200)], limit=100)
    assert hint.endswith(", ...") and len(hint) < 200


def test_parse_subgoals_reads_only_the_sequential_ones():
    report = (
        "Sequential Subgoals:\n---\n0\ttrue\tGoalFind\tfocus on substance\n"
        "1\tfalse\tGoalChangeStateOfMatter\tsubstance is in a liquid state\n---\n"
        "Unordered and Optional Subgoals:\n---\n0\ttrue\tGoalX\tbe in the kitchen\n"
    )
    assert parse_subgoals(report) == {"focus on substance": True, "substance is in a liquid state": False}


CRASH_SCRIPT = """
import json
from crl.tasks.java_engine import EngineError, java_process
from crl.tasks.sciworld import SciWorldEnv

env = SciWorldEnv("find-plant")
env.reset(2)
process = java_process(env.engine.handle)
process.kill()
result = {}
try:
    env.step("look around")
except EngineError as exc:
    result["error"] = str(exc)
env.reset(2)
for action in env.gold_actions():
    info = env.step(action).info
env.close()
result.update(starts=env.engine.starts, success=info["success"], exited=process.poll() is not None)
print(json.dumps(result))
"""


def test_engine_crash_raises_engine_error_and_the_next_reset_works():
    # In a child process: see the note on the same test in test_env_twx.py.
    result = run_isolated(CRASH_SCRIPT)
    assert "ScienceWorld engine failed" in result["error"] and "it was restarted" in result["error"]
    assert result == result | {"starts": 2, "success": True, "exited": True}


def test_random_baseline_draws_from_the_engines_valid_actions(env, tmp_path):
    from crl.agent.app import start_run
    from crl.agent.llm.scripted import ScriptedModel

    env.reset(0)
    valid = env.valid_actions()
    assert "look around" in valid and len(valid) > 50
    model = ScriptedModel([])
    result = start_run(_no_memory(tmp_path, "random"), "sciworld/find-living-thing", 1, model=model)
    steps = result.episodes[0].steps
    assert model.calls == [] and steps and all(s.decided_by == "random" for s in steps)


def test_the_posterior_acts_by_scoring_a_candidate_set_with_no_invalid_action(tmp_path):
    """The prose that made the model's replies unusable here ("The agent will focus on ...") now
    yields a candidate set of valid actions that the model scores; nothing irreversible is taken."""
    from crl.agent.app import start_run
    from crl.agent.llm.scripted import ScriptedModel

    model = ScriptedModel(lambda messages: " The agent will focus on the art studio door")
    result = start_run(_no_memory(tmp_path, "posterior"), "sciworld/find-living-thing", 1, model=model)
    steps = result.episodes[0].steps
    assert len(steps) == 3 and result.stats.scored_decisions == 3
    assert all(s.valid and not s.info.get("invalid") for s in steps)
    assert not any(s.action.startswith("focus on") for s in steps)
    for s in steps:
        candidates = s.extra.policy.posterior["candidates"]
        assert s.action in candidates["sources"] and candidates["valid"] > 50
        assert candidates["reply"] == "The agent will focus on the art studio door"
        assert len(candidates["sources"]) <= 12
    assert "look around" in steps[0].extra.policy.posterior["candidates"]["sources"]
    assert result.report()["invalid_action_rate"] == 0.0


def _no_memory(home, policy: str):
    """Settings for a three-step run under `policy` with no bank."""
    from crl.agent.config import load_settings

    return load_settings(
        {"home": str(home), "agent": {"policy": policy, "parallel": 1, "max_steps": 3}, "memory": {"enabled": False}}
    )
