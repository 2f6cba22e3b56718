"""The learning-curve harness on tiny budgets with a scripted model, and once with the embedded model."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from crl.agent.cli.main import app
from crl.agent.experiment import CurveSpec, compare_arms, load_results, run_curve, summarise
from crl.agent.llm.scripted import ScriptedModel
from crl.tasks.keyroom import solve
from crl.tasks.registry import get_task
from tests.task_fixtures import clean_registry  # noqa: F401


def solver_model():
    """Replies with the keyroom solver's next action for the state in the prompt (any seed)."""
    from crl.tasks.keyroom import KeyroomEnv

    plans = {}
    for fold in ("train", "dev"):
        rng = get_task("keyroom/key").folds.get(fold)
        for seed in list(rng[:40]):
            env = KeyroomEnv("key")
            obs = env.reset(seed)
            for action in solve(seed, "key"):
                plans[obs.text] = action
                obs = env.step(action).observation

    def reply(messages):
        text = messages[1]["content"]
        now = text.split("Now: ", 1)[1].split("\n\nValid actions:")[0]
        return " " + plans.get(now, "look")

    return ScriptedModel(reply)


def test_curve_writes_results_plot_and_table_and_resumes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = CurveSpec(
        "keyroom/key",
        ["random", "none", "episodic"],
        budget=4,
        eval_every=2,
        eval_episodes=3,
        repeats=2,
        overrides={"agent": {"reply_format": "action", "parallel": 2, "loop_breaker": False}},
    )
    model = ScriptedModel(lambda msgs: " look")
    results = run_curve(spec, tmp_path / "exp", model)
    assert (tmp_path / "exp" / "curve.png").stat().st_size > 1000
    table = (tmp_path / "exp" / "table.md").read_text()
    assert "| episodic |" in table and "random 100%" in table  # who chose the actions, per arm
    assert "## Tests between arms after 4 train episodes" in table and "| random | none |" in table
    rows = summarise(results)
    assert {r["arm"] for r in rows} == {"random", "none", "episodic"}
    assert [r["train_episodes"] for r in rows if r["arm"] == "episodic"] == [0, 2, 4]
    assert all(r["repeats"] == (1 if r["arm"] == "none" else 2) for r in rows)
    none = [r["success_rate"] for r in rows if r["arm"] == "none"]
    first = results["runs"][0]["points"][0]
    assert len(first["outcomes"]) == 3 and sum(first["outcomes"].values()) == first["successes"]
    assert none == [0.0, 0.0, 0.0]  # "look" never wins; memoryless arms are evaluated once
    calls = len(model.calls)
    run_curve(spec, tmp_path / "exp", model)  # resumes: nothing left to do
    assert len(model.calls) == calls
    assert load_results(tmp_path / "exp" / "results.json")["spec"]["budget"] == 4


def test_episodic_control_learns_from_a_teacher_within_the_curve(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = CurveSpec(
        "keyroom/key",
        ["memory"],
        budget=4,
        eval_every=4,
        eval_episodes=2,
        repeats=1,
        overrides={"agent": {"reply_format": "action", "parallel": 2}},
    )
    results = run_curve(spec, tmp_path / "exp", solver_model())
    rows = summarise(results)
    assert [r["success_rate"] for r in rows] == [1.0, 1.0]
    assert rows[1]["train_steps"] > 0


def test_cli_curve_and_report(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("crl.agent.llm.factory.build_chat_model", lambda settings: ScriptedModel(lambda m: " look"))
    r = CliRunner().invoke(
        app,
        [
            "experiment",
            "curve",
            "keyroom/key",
            "--arms",
            "random,none",
            "--budget",
            "2",
            "--eval-every",
            "2",
            "--eval-episodes",
            "2",
            "--repeats",
            "1",
            "--out",
            "exp",
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output[r.output.index("[") :])
    assert {x["arm"] for x in rows} == {"random", "none"}
    r = CliRunner().invoke(app, ["experiment", "report", "exp"])
    assert r.exit_code == 0 and "dev success by arm" in r.output
    assert "arms compared" in r.output and "McNemar p" in r.output
    r = CliRunner().invoke(app, ["experiment", "report", "exp", "--json"])
    report = json.loads(r.output[r.output.index("{") :])
    pair = report["comparisons"][0]
    assert {pair["arm_a"], pair["arm_b"]} == {"random", "none"} and pair["pairs"] == 2
    assert pair["mcnemar_p"] is not None and 0 <= pair["fisher_p"] <= 1
    r = CliRunner().invoke(app, ["experiment", "curve", "keyroom/key", "--arms", "bogus"])
    assert r.exit_code == 1 and "unknown arm" in r.output


def test_memory_arms_start_from_the_none_arms_first_point(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = CurveSpec(
        "keyroom/key",
        ["none", "memory"],
        budget=2,
        eval_every=2,
        eval_episodes=2,
        repeats=1,
        overrides={"agent": {"reply_format": "action", "parallel": 2}},
    )
    model = solver_model()
    results = run_curve(spec, tmp_path / "exp", model)
    memory = next(r for r in results["runs"] if r["arm"] == "memory")
    none = next(r for r in results["runs"] if r["arm"] == "none")
    assert memory["points"][0] == none["points"][0] | {"train_episodes": 0, "train_steps": 0}
    sampled = CurveSpec(
        "keyroom/key",
        ["none", "memory"],
        budget=2,
        eval_every=2,
        eval_episodes=2,
        repeats=1,
        overrides={"agent": {"reply_format": "action", "parallel": 2}, "llm": {"temperature": 0.7}},
    )
    from crl.agent.experiment import starts_as_none

    assert starts_as_none("memory", spec.overrides) and not starts_as_none("mixed", spec.overrides)
    assert not starts_as_none("memory", sampled.overrides)


def test_a_rules_arm_starts_from_its_twins_first_point_in_the_same_repeat(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = CurveSpec(
        "keyroom/key",
        ["mixed", "mixed+rules"],
        budget=2,
        eval_every=2,
        eval_episodes=2,
        repeats=2,
        overrides={"agent": {"reply_format": "action", "parallel": 2}, "reflect": {"every": 0}},
    )
    results = run_curve(spec, tmp_path / "exp", solver_model())
    runs = {(r["arm"], r["repeat"]): r for r in results["runs"]}
    for rep in (0, 1):
        assert runs[("mixed+rules", rep)]["points"][0] == runs[("mixed", rep)]["points"][0]
        played = list((tmp_path / "exp" / "mixed+rules" / f"repeat-{rep}" / "evals").iterdir())
        assert len(played) == 1, "the start point was played again instead of copied"
        assert len(list((tmp_path / "exp" / "mixed" / f"repeat-{rep}" / "evals").iterdir())) == 2


@pytest.mark.slow
def test_curve_with_the_embedded_model_on_an_easy_twx_game(tmp_path, monkeypatch, embedded_models_dir):
    from crl.agent.llm.embedded import embedded_model_path
    from crl.agent.llm.local import LocalChatModel

    monkeypatch.chdir(tmp_path)
    task = "twx/coin?numLocations=2&numDistractorItems=0&includeDoors=0"
    spec = CurveSpec(
        task,
        ["random", "mixed"],
        budget=2,
        eval_every=2,
        eval_episodes=2,
        repeats=1,
        overrides={
            # short prompts: prefilling the default 1024-token prompt was most of this test's 2-3 minutes
            "agent": {"parallel": 2, "max_steps": 3, "max_prompt_tokens": 384, "history_window": 1},
            "reflect": {"enabled": False},
        },
    )
    model = LocalChatModel(embedded_model_path(embedded_models_dir))
    try:
        results = run_curve(spec, tmp_path / "exp", model)
    finally:
        model.close()
    mixed = next(r for r in results["runs"] if r["arm"] == "mixed")
    assert [p["train_episodes"] for p in mixed["points"]] == [0, 2]
    assert mixed["points"][1]["train_steps"] > 0 and mixed["points"][0]["prompt_tokens_per_call"] > 50
    assert sum(mixed["points"][0]["decided_by"].values()) == sum(
        round(p["mean_steps"] * p["episodes"]) for p in mixed["points"][:1]
    )
    assert mixed["points"][0]["mean_score"] is not None  # TWX reports a score; the table shows its mean
    assert (tmp_path / "exp" / "curve.png").is_file()


def _arm_run(arm: str, repeat: int, outcomes: list[bool]) -> dict:
    point = {
        "train_episodes": 4,
        "train_steps": 0,
        "successes": sum(outcomes),
        "episodes": len(outcomes),
        "mean_steps": 1.0,
        "outcomes": {str(seed): won for seed, won in enumerate(outcomes)},
    }
    return {"arm": arm, "repeat": repeat, "points": [point], "seconds": 0.0}


def test_compare_arms_pairs_repeats_and_seeds():
    from math import comb

    from scipy import stats

    results = {
        "runs": [
            _arm_run("none", 0, [False, False, False, True]),  # run once: stands for every repeat
            _arm_run("memory", 0, [True, True, False, True]),
            _arm_run("memory", 1, [True, True, True, False]),
        ]
    }
    (row,) = compare_arms(results)
    assert (row["arm_a"], row["arm_b"], row["a"], row["b"]) == ("none", "memory", [1, 4], [6, 8])
    # pairs (repeat, seed): none wins seed 3 against repeat 1's loss; memory wins 5 of none's losses
    assert (row["pairs"], row["a_only"], row["b_only"]) == (8, 1, 5)
    assert row["mcnemar_p"] == pytest.approx(2 * (comb(6, 0) + comb(6, 1)) / 2**6)  # 2 * P(X <= 1), n = 6
    assert row["fisher_p"] == pytest.approx(stats.fisher_exact([[1, 3], [6, 2]]).pvalue)


def test_compare_arms_reads_results_without_outcomes():
    old = {"runs": [_arm_run("none", 0, [True, False]), _arm_run("memory", 0, [True, True])]}
    for run in old["runs"]:
        del run["points"][0]["outcomes"]
    (row,) = compare_arms(old)
    assert row["mcnemar_p"] is None and row["pairs"] == 0 and 0 < row["fisher_p"] <= 1


def test_cli_curve_knows_the_tasks_added_to_the_home_it_was_given(tmp_path, monkeypatch, clean_registry):
    from tests.task_fixtures import write_items

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(
        "crl.agent.llm.factory.build_chat_model",
        lambda settings: ScriptedModel(lambda m: ' final_answer {"answer": "4"}'),
    )
    items = write_items(
        tmp_path / "sums.jsonl",
        [{"id": s, "prompt": "2+2?", "answer": 4, "split": s} for s in ("train", "dev")],
    )
    home = str(tmp_path / "elsewhere")
    r = CliRunner().invoke(app, ["--home", home, "tasks", "add", str(items), "--name", "sums", "--checker", "numeric"])
    assert r.exit_code == 0, r.output
    clean_registry.use_user_tasks(None)  # a new process: nothing registered yet
    args = ["--arms", "none", "--budget", "1", "--eval-every", "1", "--eval-episodes", "1", "--out", "exp", "--json"]
    r = CliRunner().invoke(app, ["--home", home, "experiment", "curve", "jsonl/sums", *args])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output[r.output.index("[") :])
    assert [x["success_rate"] for x in rows] == [1.0, 1.0]
