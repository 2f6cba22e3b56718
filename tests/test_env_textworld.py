"""TextWorld games generated offline and played behind `TextEnv`, for real."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("textworld", reason="needs the envs extra: pip install 'complementary-rl[envs]'")

from crl.tasks.base import FOLDS  # noqa: E402
from crl.tasks.registry import get_task, make_env  # noqa: E402
from crl.tasks.textworld_games import (  # noqa: E402
    KINDS,
    TextWorldEnv,
    challenge_settings,
    clean_feedback,
    default_cache_dir,
    game_path,
)

pytestmark = pytest.mark.slow  # every new seed is generated and compiled (about a second each)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("games")


@pytest.fixture(scope="module")
def coin(cache):
    env = make_env("tw/coin_collector?level=3", cache_dir=cache)
    yield env
    env.close()


def test_kinds_are_registered_with_disjoint_folds():
    for kind in KINDS:
        spec = get_task(f"tw/{kind}")
        assert spec.family == "tw" and spec.description and spec.max_steps > 0
        train, dev, test = (set(spec.folds.get(f)) for f in FOLDS)
        assert train and dev and test and not (train & dev or train & test or dev & test)


def test_reset_generates_once_and_reuses_the_cached_game(coin, cache):
    obs = coin.reset(0)
    assert obs.goal and "coin" in obs.goal and obs.text.startswith("-=")
    assert obs.admissible_actions and obs.admissible_actions == sorted(obs.admissible_actions)
    path = game_path(cache, KINDS["coin_collector"], coin.settings, 0)
    assert path.is_file() and path.with_suffix(".json").is_file()
    stamp = path.stat().st_mtime_ns
    again = TextWorldEnv("coin_collector", level=3, cache_dir=cache)
    try:
        assert again.reset(0) == obs
    finally:
        again.close()
    assert path.stat().st_mtime_ns == stamp
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no leftover work folders


def test_admissible_step_is_played_and_inadmissible_changes_nothing(coin):
    obs = coin.reset(1)
    outcome = coin.step("dance wildly")
    assert outcome.info["invalid"] and outcome.info["action"] is None
    assert (outcome.reward, outcome.done, outcome.info["success"]) == (0.0, False, False)
    assert outcome.observation.admissible_actions == obs.admissible_actions
    move = next(a for a in obs.admissible_actions if a.startswith("go "))
    outcome = coin.step(move.replace("go ", "").upper())  # a bare direction means going there
    assert not outcome.info["invalid"] and outcome.info["action"] == move
    assert outcome.observation.text.startswith("-=") and ">" not in outcome.observation.text
    assert set(outcome.info) >= {"success", "won", "lost", "subgoals", "invalid", "action", "score"}


@pytest.mark.parametrize(
    "name",
    ["tw/coin_collector?level=3", "tw/treasure_hunter?level=3", "tw/simple", "tw/cooking?recipe=2&take=1&open=1"],
)
def test_walkthrough_reaches_success(cache, name):
    env = make_env(name, cache_dir=cache)
    try:
        for seed in (0, get_task(name).folds.test[0]):
            env.reset(seed)
            for action in env.gold_actions():
                obs, reward, done, info = env.step(action)  # a redundant walkthrough step is a no-op
                if done:
                    break
            assert done and info["success"] and info["won"] and not info["lost"], (name, seed)
            assert info["score"] == info["max_score"] > 0
            assert info["subgoals"] and all(info["subgoals"].values())
            with pytest.raises(RuntimeError, match="episode is over"):
                env.step("look")
    finally:
        env.close()


def test_knobs_change_the_game(cache):
    short, long = (TextWorldEnv("coin_collector", level=n, cache_dir=cache) for n in (1, 4))
    try:
        short.reset(5)
        long.reset(5)
        assert len(short.gold_actions()) == 1 < len(long.gold_actions()) == 4
    finally:
        short.close()
        long.close()
    with pytest.raises(ValueError, match="no setting size"):
        make_env("tw/coin_collector?size=3")
    with pytest.raises(ValueError, match="go must be one of 1, 6, 9, 12"):
        make_env("tw/cooking?go=2")


def test_the_fold_picks_the_held_out_content(cache):
    kind = KINDS["cooking"]
    splits = [challenge_settings(kind, kind.defaults, seed)["split"] for seed in (0, 100_000, 200_000)]
    assert splits == ["train", "valid", "test"]
    assert challenge_settings(KINDS["simple"], KINDS["simple"].defaults, 100_000)["test"] is True
    env = TextWorldEnv("cooking", cache_dir=cache)
    try:
        env.reset(100_000)
    finally:
        env.close()
    path = game_path(cache, kind, env.settings, 100_000).with_suffix(".json")
    assert "-valid-" in json.loads(path.read_text())["metadata"]["uuid"]


def test_generation_is_deterministic_across_cache_dirs(tmp_path):
    games = []
    for folder in ("a", "b"):
        env = TextWorldEnv("treasure_hunter", level=2, cache_dir=tmp_path / folder)
        env.reset(7)
        games.append(env.gold_actions())
        env.close()
    assert games[0] == games[1]


def test_default_cache_dir_follows_crl_home(monkeypatch, tmp_path):
    monkeypatch.setenv("CRL_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "games"
    monkeypatch.delenv("CRL_HOME")
    assert str(default_cache_dir()) == ".crl/games"


def test_clean_feedback_drops_the_prompt_and_status_bar():
    assert clean_feedback("You take it.\n\n\n\n>        -= Attic =-1/2") == "You take it."
    assert clean_feedback("a > b\n\n\n\nc") == "a > b\n\nc"


def test_close_stops_the_game(cache):
    env = TextWorldEnv("coin_collector", level=1, cache_dir=cache)
    env.reset(0)
    env.close()
    with pytest.raises(RuntimeError, match="reset"):
        env.step("take coin")
