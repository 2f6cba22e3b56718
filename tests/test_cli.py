"""The `crl` commands end to end with a scripted model in place of the LLM."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import crl.agent.app
from crl.agent.cli.main import app
from crl.agent.llm.scripted import ScriptedModel
from crl.tasks.keyroom import solve
from crl.tasks.registry import fold_seeds


@pytest.fixture
def scripted(monkeypatch):
    """Replace the model the CLI would build with a solver-backed scripted one."""

    def install(replies):
        model = ScriptedModel(replies)
        monkeypatch.setattr(crl.agent.app, "build_chat_model", lambda settings: model)
        return model

    return install


def invoke(*args):
    result = CliRunner().invoke(app, list(args))
    return result


def test_run_runs_show_and_json(crl_home, scripted):
    seeds = fold_seeds("keyroom/key", "train", 2)
    scripted([f" {a}" for s in seeds for a in solve(s, "key")])
    r = invoke("run", "keyroom/key", "--episodes", "2", "--parallel", "1", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.output[r.output.index("{") :])
    assert report["episodes"] == 2 and report["success_rate"] == 1.0
    lo, hi = report["ci95"]
    assert 0 < lo < hi == 1.0

    r = invoke("runs", "--json")
    runs = json.loads(r.output)
    assert [x["run_id"] for x in runs] == [report["run_id"]] and runs[0]["status"] == "finished"

    r = invoke("show", report["run_id"], "1")
    assert r.exit_code == 0 and "success" in r.output and "Action: take" in r.output
    r = invoke("show", report["run_id"], "7")
    assert r.exit_code == 1 and "no episode 7" in r.output


def test_run_table_output(crl_home, scripted):
    scripted(lambda msgs: " hmm\nAction: look")
    r = invoke("run", "keyroom/key", "-n", "2", "--max-steps", "2")
    assert r.exit_code == 0, r.output
    assert "success rate" in r.output and "0.0%" in r.output


def test_eval_reports_interval_on_dev_fold(crl_home, scripted):
    model = scripted(lambda msgs: " hmm\nAction: look")
    r = invoke("eval", "keyroom/door", "--fold", "dev", "-n", "3", "--max-steps", "1", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.output[r.output.index("{") :])
    assert report["fold"] == "dev" and report["episodes"] == 3 and report["ci95"][0] == 0.0
    assert len(model.calls) >= 1


def test_eval_seed_offset_extends_an_evaluation_without_replaying_it(crl_home, scripted):
    scripted(lambda msgs: " hmm\nAction: look")
    r = invoke("eval", "keyroom/door", "-n", "2", "--seed", "3", "--max-steps", "1", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.output[r.output.index("{") :])
    assert report["seed_offset"] == 3
    info = json.loads((crl_home / "evals" / report["run_id"] / "run.json").read_text())
    assert info["seeds"] == fold_seeds("keyroom/door", "dev", 2, 3) != fold_seeds("keyroom/door", "dev", 2)
    r = invoke("eval", "keyroom/door", "--fold", "test", "-n", "2", "--seed", "10000000")
    assert r.exit_code == 1 and "has only" in r.output and "Traceback" not in r.output


def test_errors_are_one_line_not_tracebacks(crl_home, scripted):
    scripted([])
    r = invoke("eval", "keyroom/key", "--fold", "train")  # refused by the parser: the choices are dev and test
    assert r.exit_code == 2 and "'dev'" in r.output and "'test'" in r.output and "Traceback" not in r.output
    r = invoke("run", "nosuch/task")
    assert r.exit_code == 1 and "Known tasks" in r.output
    r = invoke("show", "no-such-run")
    assert r.exit_code == 1 and "crl runs" in r.output


def test_tasks_lists_keyroom_variants(crl_home):
    r = invoke("tasks", "--json")
    names = [t["name"] for t in json.loads(r.output)]
    assert {"keyroom/key", "keyroom/door", "keyroom/chest", "keyroom/compound"} <= set(names)


def test_run_with_finetune_auto_checks_the_scheduler_and_runs_a_due_round(crl_home, scripted, monkeypatch):
    from crl.finetune import scheduler

    seeds = fold_seeds("keyroom/key", "train", 2)
    scripted([f" {a}" for s in seeds for a in solve(s, "key")])
    monkeypatch.setenv("CRL_FINETUNE__AUTO_MIN_NEW_EPISODES", "3")
    r = invoke("run", "keyroom/key", "-n", "2", "--parallel", "1", "--policy", "llm", "--finetune-auto", "--json")
    assert r.exit_code == 0, r.output
    report = json.loads(r.output[r.output.index("{") :])
    assert report["finetune_round"] == {"new_episodes": 2, "threshold": 3}

    rounds = []

    def fake_round(ctx, trigger):
        rounds.append(trigger.new_episodes)
        return scheduler.RoundRecord(round=1, started_at=0.0, trigger={}, cutoff=trigger.cutoff, status="promoted")

    monkeypatch.setattr(scheduler, "run_round", fake_round)
    scripted([f" {a}" for a in solve(fold_seeds("keyroom/key", "train", 3)[2], "key")])
    r = invoke("run", "keyroom/key", "-n", "1", "--seed", "2", "--policy", "llm", "--finetune-auto")
    assert r.exit_code == 0, r.output
    assert rounds == [3] and "fine-tuning round 1: promoted" in r.output
    r = invoke("run", "keyroom/key", "-n", "1", "--seed", "2", "--policy", "llm", "--max-steps", "1")
    assert rounds == [3]  # without the flag the scheduler is not consulted


def test_finetune_auto_once_reports_the_check(crl_home):
    r = invoke("finetune", "auto", "--once", "--min-new", "4", "--json")
    assert r.exit_code == 0, r.output
    line = json.loads(r.output[r.output.index("{") :])
    assert (line["new_episodes"], line["threshold"]) == (0, 4) and "round" not in line
    r = invoke("finetune", "auto", "--once", "--min-new", "4")
    assert "fine-tuning: 0/4 new qualifying episodes; no round yet" in r.output
