"""TextWorldExpress behind `TextEnv`, run for real on its Java engine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("textworld_express", reason="needs the envs extra: pip install 'complementary-rl[envs]'")

from crl.tasks.base import FOLDS, TextEnv  # noqa: E402
from crl.tasks.java_engine import SuiteNotInstalled, java_process, match_action  # noqa: E402
from crl.tasks.registry import get_task, make_env  # noqa: E402
from crl.tasks.twx import GAMES, TwxEnv, fold_of  # noqa: E402

REQUIRED = ("coin", "twc", "cookingworld", "mapreader", "sorting", "arithmetic")
EASY_COIN = "twx/coin?numLocations=3&numDistractorItems=0&includeDoors=0"


@pytest.fixture(scope="module")
def coin():
    env = make_env(EASY_COIN)
    yield env
    env.close()


def run_isolated(script: str) -> dict:
    """Run `script` in a fresh interpreter at the repo root; it prints one JSON object last."""
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=Path(__file__).resolve().parents[1],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_games_are_registered_with_the_engines_own_folds(coin):
    coin.reset(0)
    raw = coin.engine.handle
    engine_folds = {
        "train": raw.getValidSeedsTrain(),
        "dev": raw.getValidSeedsDev(),
        "test": raw.getValidSeedsTest(),
    }
    for game in REQUIRED:
        spec = get_task(f"twx/{game}")
        assert spec.family == "twx" and spec.description and spec.max_steps == GAMES[game].max_steps
        seeds = {fold: set(spec.folds.get(fold)) for fold in FOLDS}
        assert {fold: sorted(s) for fold, s in seeds.items()} == engine_folds
        assert not (seeds["train"] & seeds["dev"] or seeds["train"] & seeds["test"] or seeds["dev"] & seeds["test"])
    assert isinstance(coin, TextEnv) and coin.name == "twx/coin"


def test_reset_gives_goal_and_admissible_actions_and_is_deterministic(coin):
    first = coin.reset(7)
    assert "coin" in first.goal.lower() and first.text
    assert first.admissible_actions and "look around" in first.admissible_actions
    assert first.admissible_actions == sorted(first.admissible_actions)
    assert coin.reset(7) == first
    assert len({coin.reset(seed).text for seed in range(10)}) > 1


def test_admissible_step_is_played_and_inadmissible_changes_nothing(coin):
    obs = coin.reset(3)
    outcome = coin.step("xyzzy plugh")
    assert outcome.info["invalid"] and outcome.info["action"] is None
    assert (outcome.reward, outcome.done, outcome.info["success"]) == (0.0, False, False)
    assert outcome.observation.text.startswith(
        "Nothing happens: 'xyzzy plugh' is not a valid action here.\n\nYou are in"
    )
    assert outcome.observation.admissible_actions == obs.admissible_actions
    move = next(a for a in obs.admissible_actions if a.startswith("move "))
    outcome = coin.step(move)
    assert not outcome.info["invalid"] and outcome.info["action"] == move
    assert outcome.observation.text != obs.text
    assert set(outcome.info) >= {"success", "won", "subgoals", "invalid", "action", "score"}


def test_every_observation_says_which_room_unless_turned_off(coin):
    start = coin.reset(3)
    assert start.text.startswith("You are in the ")
    room = start.text.split(".")[0]
    listing = coin.step("inventory").observation.text
    assert listing.startswith("Inventory") and listing.endswith(start.text)
    moved = coin.step(next(a for a in start.admissible_actions if a.startswith("move "))).observation.text
    assert moved.count("You are in the ") == 1 and not moved.startswith(room)
    bare = make_env(EASY_COIN + "&roomContext=0")
    try:
        assert bare.reset(3).text == start.text
        assert bare.step("inventory").observation.text.strip() == listing.split("\n\n")[0]
    finally:
        bare.close()
    with pytest.raises(ValueError, match="roomContext must be 0 or 1"):
        TwxEnv("coin", roomContext=2)


def test_free_text_is_normalised_onto_admissible_actions():
    actions = ["move east", "take coin", "open door to north"]
    assert match_action("Go East.", actions, move_verb="move") == "move east"
    assert match_action("east", actions, move_verb="move") == "move east"
    assert match_action("  TAKE the coin ", actions) == "take coin"
    assert match_action("open the door to north", actions) == "open door to north"
    assert match_action("take", actions) is None
    assert match_action("west", actions, move_verb="move") is None


@pytest.mark.parametrize("game", list(GAMES))
def test_gold_path_reaches_success_in_every_fold(game):
    env = make_env(f"twx/{game}")
    try:
        _check_gold_paths(env, game)
    finally:
        env.close()


def _check_gold_paths(env, game):
    for seed in (0, 1, 10_002, 20_003):
        env.reset(seed)
        gold = env.gold_actions()
        assert gold, (game, seed)
        total = 0.0
        for i, action in enumerate(gold):  # noqa: B007 (i names the unplayed rest on failure)
            obs, reward, done, info = env.step(action)
            total += reward
            if done:
                break
        assert info["success"] and info["won"] and done, (game, seed, gold[i + 1 :])
        assert total == pytest.approx(1.0) and info["score"] == pytest.approx(1.0)
        assert info["subgoals"] and all(info["subgoals"].values())
        with pytest.raises(RuntimeError, match="episode is over"):
            env.step("look around")


def test_score_increments_are_subgoals_reached_in_order():
    env = TwxEnv("twc", numLocations=1, numItemsToPutAway=2)
    try:
        env.reset(5)
        seen = []
        for action in env.gold_actions():
            info = env.step(action).info
            seen.append(sum(info["subgoals"].values()))
        assert list(info["subgoals"]) == ["score_1", "score_2", "score_3", "score_4"]
        assert seen == sorted(seen) and seen[0] == 0 and seen[-1] == 4
    finally:
        env.close()


def test_query_knobs_change_the_game():
    small, large = make_env("twx/coin?numLocations=1&includeDoors=0"), make_env("twx/coin?numLocations=11")
    try:
        assert small.reset(4) != large.reset(4)
        assert small.engine.handle.getGenerationProperties()["numLocations"] == 1
        assert large.engine.handle.getGenerationProperties()["numLocations"] == 11
        assert len(small.gold_actions()) <= 2 < len(large.gold_actions())
    finally:
        small.close()
        large.close()
    with pytest.raises(ValueError, match="no parameter numRooms"):
        make_env("twx/coin?numRooms=3")
    bad = make_env("twx/coin?numLocations=99")
    try:
        with pytest.raises(ValueError, match="less than or equal to 11"):
            bad.reset(0)
        assert not bad.engine.running
    finally:
        bad.close()


def test_seed_picks_the_engine_fold(coin):
    assert [fold_of(s) for s in (0, 999, 10_000, 20_999)] == ["train", "train", "dev", "test"]
    with pytest.raises(ValueError, match="none of TextWorldExpress's folds"):
        coin.reset(5000)
    game_sets = []
    for seed in (12, 10_012, 20_012):
        coin.reset(seed)
        game_sets.append(coin.engine.handle.getGenerationProperties()["gameSet"])
    assert len(set(game_sets)) == 3


def test_engine_is_started_once_and_reused_across_resets():
    env = TwxEnv("coin")
    try:
        assert not env.engine.running
        for seed in range(5):
            env.reset(seed)
        assert env.engine.starts == 1
    finally:
        env.close()
    assert not env.engine.running


CRASH_SCRIPT = """
import json
from crl.tasks.java_engine import EngineError, java_process
from crl.tasks.twx import TwxEnv

env = TwxEnv("coin", numLocations=2)
env.reset(1)
java_process(env.engine.handle).kill()
result = {}
try:
    env.step("look around")
except EngineError as exc:
    result["error"] = str(exc)
try:
    env.step("look around")
except RuntimeError as exc:
    result["after"] = str(exc)
obs = env.reset(1)
for action in env.gold_actions():
    info = env.step(action).info
result.update(starts=env.engine.starts, admissible=bool(obs.admissible_actions), success=info["success"])
env.close()
print(json.dumps(result))
"""


def test_engine_crash_raises_engine_error_and_the_next_reset_works():
    # In a child process: after a killed JVM, py4j's failed reconnects can leave CPython 3.11.7
    # to raise a spurious "AST constructor recursion depth mismatch" in pytest's next import.
    result = run_isolated(CRASH_SCRIPT)
    assert "TextWorldExpress engine failed" in result["error"] and "it was restarted" in result["error"]
    assert "episode is over" in result["after"]
    assert result == result | {"starts": 2, "admissible": True, "success": True}


def test_close_stops_the_java_process():
    env = TwxEnv("sorting")
    env.reset(0)
    process = java_process(env.engine.handle)
    env.close()
    assert process.poll() is not None
    with pytest.raises(RuntimeError, match="reset"):
        env.step("look around")


def test_a_missing_suite_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "textworld_express", None)
    assert get_task("twx/coin").max_steps  # listing tasks never imports a suite
    with pytest.raises(SuiteNotInstalled, match=r"pip install 'complementary-rl\[envs\]'.*textworld-express"):
        make_env("twx/coin")


def test_seeds_that_start_the_same_game_share_its_game_id():
    env = make_env("twx/twc?numLocations=1&numItemsToPutAway=2")
    try:
        ids = {}
        for seed in (10011, 10015, 10000):
            first = env.reset(seed).text
            ids[seed] = (env.game_id(), first)
        # dev seeds 10011 and 10015 start one game (the living room with a pen and a used plastic cup)
        assert ids[10011] == ids[10015]
        assert ids[10000][0] != ids[10011][0]
        assert len(ids[10011][0]) == 16
    finally:
        env.close()
    coin = make_env(EASY_COIN)
    try:
        with pytest.raises(RuntimeError, match="reset"):
            coin.game_id()
        coin.reset(10000)
        assert coin.game_id() is None  # several rooms: the first one does not show the game
    finally:
        coin.close()
