"""`crl compare`: runs on the same seeds, paired seed by seed."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from crl.agent.cli.main import app
from crl.agent.run_compare import compare_runs, fill_games, pair, pooled, run_outcomes
from crl.agent.runs import RunInfo, RunStore
from crl.memory.storage.episode_log import EpisodeLog
from crl.memory.trajectory import Episode

TASK = "keyroom/key"


def episode(
    run_id: str, n: int, seed: int, success: bool, status: str = "done", points: int = 0, game: str | None = None
) -> Episode:
    return Episode(
        episode_id=f"{run_id}-{n:04d}",
        run_id=run_id,
        task=TASK,
        seed=seed,
        goal="take the key",
        status=status,
        success=success,
        subgoals={f"score_{i + 1}": i < points for i in range(3)},
        game=game,
    )


def write_run(
    runs_dir, run_id: str, wins: dict[int, bool], task: str = TASK, games: dict[int, str] | None = None
) -> None:
    store = RunStore(runs_dir)
    store.create(RunInfo(run_id=run_id, kind="eval", task=task, seeds=sorted(wins), model="m"))
    info = store.load(run_id)
    info.status, info.pid = "finished", None
    store.save(info)
    with EpisodeLog(store.log_path(run_id)) as log:
        for n, (seed, won) in enumerate(sorted(wins.items())):
            ep = episode(run_id, n, seed, won, game=(games or {}).get(seed))
            log.start(ep)
            log.end(ep)


def test_a_seed_counts_with_its_first_finished_episode_and_errors_count_for_neither():
    eps = [
        episode("r", 0, 7, True, points=2),
        episode("r", 1, 7, False),
        episode("r", 2, 8, False, status="error"),
        episode("r", 3, 9, False, status="running"),
        episode("r", 4, 10, False, status="truncated", points=1),
    ]
    run = run_outcomes("r", "r", TASK, "m", "eval", eps)
    assert run.outcomes == {(0, 7): True, (0, 10): False}
    assert (run.errored, run.unfinished) == (1, 1)
    row = run.summary()
    assert row["seeds"] == 2 and row["successes"] == 1 and row["mean_points"] == 1.5
    assert row["outcomes"] == {"7": True, "10": False}
    assert 0 < row["ci95"][0] < 0.5 < row["ci95"][1] < 1


def test_pairs_count_only_the_seeds_both_finished_and_test_the_discordant_ones():
    a = run_outcomes("a", "ra", TASK, "m", "eval", [episode("ra", s, s, s < 6) for s in range(8)])
    b = run_outcomes("b", "rb", TASK, "m", "eval", [episode("rb", s, s, s < 1) for s in range(1, 9)])
    result = pair(a, b)
    assert result["seeds"] == 7  # seeds 1-7
    assert (result["a_successes"], result["b_successes"]) == (5, 0)
    assert (result["a_only"], result["b_only"]) == (5, 0)
    assert result["p_two_sided"] == pytest.approx(0.0625)
    assert result["p_a_better"] == pytest.approx(0.03125)
    assert pair(b, a)["p_a_better"] == pytest.approx(1.0)


def test_pooled_repeats_pair_in_order_with_another_labels_repeats():
    def run(name, wins):
        return run_outcomes(
            name, name, TASK, f"model-{name}", "eval", [episode(name, s, s, w) for s, w in wins.items()]
        )

    a = pooled("a", [run("a0", {1: True, 2: True}), run("a1", {1: True, 2: False})])
    b = pooled("b", [run("b0", {1: False, 2: True}), run("b1", {1: True, 2: False})])
    assert a.outcomes == {(0, 1): True, (0, 2): True, (1, 1): True, (1, 2): False}
    assert a.run_ids == ["a0", "a1"] and a.model == "model-a0, model-a1"
    result = pair(a, b)
    assert (result["seeds"], result["a_only"], result["b_only"]) == (4, 1, 0)
    row = a.summary()
    assert row["outcomes"] == {"0:1": True, "0:2": True, "1:1": True, "1:2": False} and row["run_id"] == "a0, a1"
    single = pooled("only", [run("c0", {1: True})])
    assert single.label == "only" and single.summary()["outcomes"] == {"1": True}
    other = run_outcomes("d", "d", "keyroom/door", "m", "eval", [])
    with pytest.raises(ValueError, match="different tasks"):
        pooled("x", [run("c0", {1: True}), other])


def test_compare_pairs_against_the_first_unless_all_pairs_and_refuses_what_cannot_be_paired():
    runs = [run_outcomes(x, x, TASK, "m", "eval", [episode(x, 0, 1, True)]) for x in "abc"]
    assert [(p["a"], p["b"]) for p in compare_runs(runs)["pairs"]] == [("a", "b"), ("a", "c")]
    assert len(compare_runs(runs, all_pairs=True)["pairs"]) == 3
    with pytest.raises(ValueError, match="at least two"):
        compare_runs(runs[:1])
    other = run_outcomes("d", "d", "keyroom/door", "m", "eval", [episode("d", 0, 1, True)])
    with pytest.raises(ValueError, match="different tasks"):
        compare_runs([runs[0], other])
    with pytest.raises(ValueError, match="same label"):
        compare_runs([runs[0], runs[0]])


def test_crl_compare_reads_runs_by_id_and_by_folder_of_another_home(crl_home, tmp_path, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    write_run(crl_home / "evals", "with-memory", {s: s % 2 == 0 or s < 4 for s in range(12)})
    other_home = tmp_path / "other" / ".crl"
    write_run(other_home / "evals", "alone", {s: s % 2 == 0 and s > 4 for s in range(12)})
    folder = str(other_home / "evals" / "alone")

    r = CliRunner().invoke(app, ["compare", "memory=with-memory", f"alone={folder}", "--json"])
    assert r.exit_code == 0, r.output
    result = json.loads(r.stdout)
    assert [row["successes"] for row in result["runs"]] == [8, 3]
    [p] = result["pairs"]
    assert (p["a"], p["b"], p["seeds"], p["a_only"], p["b_only"]) == ("memory", "alone", 12, 5, 0)

    text = CliRunner().invoke(app, ["compare", "with-memory", folder]).stdout
    assert "with-memory" in text and "alone" in text and "67% (39%-86%)" in text and "0.0625" in text

    write_run(crl_home / "evals", "with-memory-2", {s: s < 6 for s in range(12)})
    write_run(other_home / "evals", "alone-2", {s: s < 6 for s in range(12)})
    r = CliRunner().invoke(
        app,
        ["compare", "memory=with-memory,with-memory-2", f"alone={folder},{other_home / 'evals' / 'alone-2'}", "--json"],
    )
    assert r.exit_code == 0, r.output
    result = json.loads(r.stdout)
    assert [row["seeds"] for row in result["runs"]] == [24, 24]
    assert [row["successes"] for row in result["runs"]] == [14, 9]
    assert (result["pairs"][0]["a_only"], result["pairs"][0]["b_only"]) == (5, 0)

    r = CliRunner().invoke(app, ["compare", "with-memory", "no-such-run"])
    assert r.exit_code == 1 and "no run 'no-such-run'" in r.output
    r = CliRunner().invoke(app, ["compare", "with-memory", os.fspath(tmp_path)])
    assert r.exit_code == 1 and "not a run's folder" in r.output


def test_seeds_that_start_the_same_game_count_once_on_distinct_games():
    games = {s: "g-living-room" if s in (1, 2, 3, 4, 5, 6) else f"g{s}" for s in range(1, 11)}
    a = run_outcomes("a", "ra", TASK, "m", "eval", [episode("ra", s, s, s <= 7, game=games[s]) for s in range(1, 11)])
    b = run_outcomes("b", "rb", TASK, "m", "eval", [episode("rb", s, s, s == 7, game=games[s]) for s in range(1, 11)])
    result = pair(a, b)
    assert (result["seeds"], result["a_only"], result["b_only"]) == (10, 6, 0)
    assert result["p_two_sided"] == pytest.approx(0.03125)
    # six seeds of one game are one trial: games 1 (seeds 1-6), 7, 8, 9, 10
    assert (result["games"], result["games_a_only"], result["games_b_only"]) == (5, 1, 0)
    assert (result["games_a_successes"], result["games_b_successes"]) == (2, 1)
    assert result["games_p_two_sided"] == pytest.approx(1.0)
    assert a.summary()["games"] == 5
    # the lowest seed speaks for its game, even where a later copy went the other way
    flipped = run_outcomes(
        "c", "rc", TASK, "m", "eval", [episode("rc", s, s, s in (2, 3, 7), game=games[s]) for s in range(1, 11)]
    )
    assert pair(flipped, b)["games_a_only"] == 0 and pair(flipped, b)["a_only"] == 2


def test_without_logged_games_every_seed_is_its_own_game_and_repeats_keep_their_games_apart():
    a = run_outcomes("a", "ra", TASK, "m", "eval", [episode("ra", s, s, s < 3) for s in range(6)])
    b = run_outcomes("b", "rb", TASK, "m", "eval", [episode("rb", s, s, False) for s in range(6)])
    result = pair(a, b)
    assert result["games"] == result["seeds"] == 6
    assert {k: result[f"games_{k}"] for k in ("a_only", "b_only", "p_two_sided")} == {
        k: result[k] for k in ("a_only", "b_only", "p_two_sided")
    }

    def run(name, wins):
        return run_outcomes(
            name, name, TASK, "m", "eval", [episode(name, s, s, w, game="same") for s, w in wins.items()]
        )

    pooled_a = pooled("a", [run("a0", {1: True, 2: True}), run("a1", {1: True, 2: True})])
    pooled_b = pooled("b", [run("b0", {1: False, 2: False}), run("b1", {1: False, 2: False})])
    result = pair(pooled_a, pooled_b)
    assert (result["seeds"], result["games"], result["games_a_only"]) == (4, 2, 2)


def test_crl_compare_shows_distinct_games_only_where_seeds_repeat_a_game(crl_home, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    games = {s: "one" if s < 4 else f"g{s}" for s in range(8)}
    write_run(crl_home / "evals", "memory", {s: s < 5 for s in range(8)}, games=games)
    write_run(crl_home / "evals", "alone", {s: s == 4 for s in range(8)}, games=games)
    stored = RunStore(crl_home / "evals").episodes("memory")
    assert [e.game for e in stored][:5] == ["one", "one", "one", "one", "g4"]
    text = CliRunner().invoke(app, ["compare", "memory", "alone"]).stdout
    assert "paired on distinct games" in text and "3 of memory and alone's paired seeds" in text
    [p] = json.loads(CliRunner().invoke(app, ["compare", "memory", "alone", "--json"]).stdout)["pairs"]
    assert (p["seeds"], p["a_only"], p["games"], p["games_a_only"], p["games_b_only"]) == (8, 4, 5, 1, 0)
    write_run(crl_home / "evals", "plain-a", {s: s < 5 for s in range(8)})
    write_run(crl_home / "evals", "plain-b", {s: s == 4 for s in range(8)})
    assert "distinct games" not in CliRunner().invoke(app, ["compare", "plain-a", "plain-b"]).stdout


def test_crl_compare_games_identifies_the_games_of_runs_that_did_not_log_them(crl_home, monkeypatch):
    from crl.tasks.registry import make_env

    env = make_env(TASK)
    seeds = [100000 + s for s in range(6)]
    ids = []
    for seed in seeds:
        env.reset(seed)
        ids.append(env.game_id())
    write_run(crl_home / "evals", "new", {s: True for s in seeds})
    write_run(crl_home / "evals", "old", {s: s % 2 == 0 for s in seeds})
    r = CliRunner().invoke(app, ["compare", "new", "old", "--games", "--json"])
    assert r.exit_code == 0, r.output
    [p] = json.loads(r.stdout)["pairs"]
    assert p["games"] == len(set(ids)) and p["games_a_only"] == p["a_only"] == 3

    calls = []
    runs = [
        run_outcomes(
            "a", "a", TASK, "m", "eval", [episode("a", s, s, True, game="known" if s == 1 else None) for s in range(4)]
        )
    ]
    filled = fill_games(runs, lambda seed: calls.append(seed) or ("same" if seed < 3 else None))
    assert filled == 2 and calls == [0, 2, 3] and runs[0].games == {(0, 0): "same", (0, 1): "known", (0, 2): "same"}
