"""`crl compare`: runs on the same seeds, paired seed by seed."""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from crl.agent.cli.main import app
from crl.agent.run_compare import compare_runs, pair, pooled, run_outcomes
from crl.agent.runs import RunInfo, RunStore
from crl.memory.storage.episode_log import EpisodeLog
from crl.memory.trajectory import Episode

TASK = "keyroom/key"


def episode(run_id: str, n: int, seed: int, success: bool, status: str = "done", points: int = 0) -> Episode:
    return Episode(
        episode_id=f"{run_id}-{n:04d}",
        run_id=run_id,
        task=TASK,
        seed=seed,
        goal="take the key",
        status=status,
        success=success,
        subgoals={f"score_{i + 1}": i < points for i in range(3)},
    )


def write_run(runs_dir, run_id: str, wins: dict[int, bool], task: str = TASK) -> None:
    store = RunStore(runs_dir)
    store.create(RunInfo(run_id=run_id, kind="eval", task=task, seeds=sorted(wins), model="m"))
    info = store.load(run_id)
    info.status, info.pid = "finished", None
    store.save(info)
    with EpisodeLog(store.log_path(run_id)) as log:
        for n, (seed, won) in enumerate(sorted(wins.items())):
            ep = episode(run_id, n, seed, won)
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
