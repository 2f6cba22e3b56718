"""Evaluation with retries: lost seeds replayed, reading a scratch copy of memory that holds the earlier attempts."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from crl.agent.app import open_bank
from crl.agent.cli.main import app
from crl.agent.config import load_settings
from crl.agent.llm.scripted import ScriptedModel
from crl.agent.retries import check_retries, evaluate_with_retries
from crl.tasks.keyroom import solve
from crl.tasks.registry import fold_seeds

SEED = fold_seeds("keyroom/key", "dev", 1)[0]
PLAN = solve(SEED, "key")


def settings_for(home, memory: bool):
    # loop_breaker off: looking again must stay possible; one step short of looking in every room
    agent = {
        "policy": "posterior",
        "parallel": 1,
        "memory": "off",
        "loop_breaker": False,
        "max_steps": 2 * len(PLAN) - 1,
    }
    return load_settings(
        {"home": str(home), "agent": agent, "memory": {"enabled": memory}, "reflect": {"enabled": False}}
    )


def looker():
    """A model that prefers looking around (by one nat) over the plan's moves."""
    return ScriptedModel(lambda messages: json.dumps({"look": 0.0} | {a: -1.0 for a in PLAN}))


def stored_episodes(settings) -> int:
    bank = open_bank(settings)
    try:
        return bank.stats().episodes
    finally:
        bank.close()


def test_a_retry_reads_the_lost_attempt_and_wins_without_writing_the_users_memory(crl_home):
    settings = settings_for(crl_home, memory=True)
    result = evaluate_with_retries(settings, "keyroom/key", 1, attempts=3, fold="dev", model=looker())
    report = result.report()
    assert report["attempts"][0]["successes"] == 0
    assert report["solved_within"] == 1 and report["first_win"][str(SEED)] > 1
    assert len(report["attempts"]) == report["first_win"][str(SEED)]  # no attempt after the win
    retry = result.attempts[-1].episodes[0]
    assert retry.seed == SEED and retry.success
    assert any(st.extra.policy.posterior["memory_changed_argmax"] for st in retry.steps)
    scratch = result.scratch_home
    assert scratch is not None and scratch.parent == crl_home / "retries"
    assert (scratch / "evals" / result.attempts[-1].info.run_id).is_dir()
    assert stored_episodes(settings.model_copy(update={"home": scratch})) == len(result.attempts) - 1
    assert stored_episodes(settings) == 0


def test_without_memory_a_retry_replays_the_same_loss(crl_home):
    result = evaluate_with_retries(settings_for(crl_home, memory=False), "keyroom/key", 1, 2, model=looker())
    first, second = (a.episodes[0] for a in result.attempts)
    assert not first.success and not second.success
    assert [s.action for s in first.steps] == [s.action for s in second.steps]
    assert result.report()["solved_within"] == 0
    scratch = result.scratch_home
    assert scratch is not None and not (scratch / "memory").exists(), "without memory nothing is copied"
    assert (scratch / "evals" / result.attempts[1].info.run_id).is_dir(), "the retry is logged in its series"


def test_retries_refuse_a_memory_server_and_fewer_than_one_attempt(crl_home):
    settings = settings_for(crl_home, memory=True)
    served = settings.model_copy(update={"memory": settings.memory.model_copy(update={"url": "http://127.0.0.1:9"})})
    with pytest.raises(ValueError, match="memory server"):
        check_retries(served, 2)
    check_retries(served, 1)
    with pytest.raises(ValueError, match="attempts"):
        check_retries(settings, 0)


def test_crl_eval_attempts_reports_success_within_all_attempts(crl_home):
    result = CliRunner().invoke(
        app, ["eval", "keyroom/key", "-n", "4", "--policy", "random", "--attempts", "2", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    first = report["attempts"][0]
    assert first["episodes"] == 4 and report["successes"] == first["successes"]
    lost = 4 - first["successes"]
    if lost:
        assert report["attempts"][1]["episodes"] == lost
    assert report["solved_within"] == sum(a is not None for a in report["first_win"].values())
    assert report["solved_within"] >= first["successes"]
    assert not any(a["memory"] for a in report["attempts"]), "the random policy never reads memory"


def test_a_finished_evaluation_can_be_the_first_attempt_and_a_mismatch_is_refused(crl_home):
    from crl.agent.app import start_run

    settings = settings_for(crl_home, memory=True)
    model = looker()
    first = start_run(settings, "keyroom/key", 1, fold="dev", kind="eval", model=model)
    result = evaluate_with_retries(settings, "keyroom/key", 1, 2, model=model, first=first.info.run_id)
    assert result.attempts[0].info.run_id == first.info.run_id
    assert result.report()["solved_within"] == 1 and result.report()["first_win"][str(SEED)] == 2
    again = evaluate_with_retries(settings, "keyroom/key", 1, 2, model=model, first=first.info.run_id)
    assert again.scratch_home == result.scratch_home.with_name(first.info.run_id + "-2")
    assert again.report()["solved_within"] == 1
    with pytest.raises(ValueError, match=r"fold dev \(here test\)"):
        evaluate_with_retries(settings, "keyroom/key", 1, 2, fold="test", model=model, first=first.info.run_id)
    alone = settings.model_copy(update={"memory": settings.memory.model_copy(update={"enabled": False})})
    with pytest.raises(ValueError, match="memory.enabled True"):
        evaluate_with_retries(alone, "keyroom/key", 1, 2, model=model, first=first.info.run_id)


def test_crl_eval_attempts_prints_each_attempt_and_the_success_within_them(crl_home):
    result = CliRunner().invoke(app, ["eval", "keyroom/key", "-n", "2", "--policy", "random", "--attempts", "2"])
    assert result.exit_code == 0, result.output
    assert "attempt 1" in result.stdout and "solved within" in result.stdout


def test_crl_eval_first_needs_several_attempts(crl_home):
    result = CliRunner().invoke(app, ["eval", "keyroom/key", "--first", "20261205-000000-abcd"], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "--attempts 2" in result.output


def test_a_sampled_retry_takes_a_new_draw_and_a_greedy_one_does_not(crl_home):
    import random

    from crl.agent.posterior import PosteriorConfig, decide
    from crl.agent.retries import new_draw

    sampled = load_settings({"home": str(crl_home), "agent": {"posterior": {"mode": "sample"}}})
    assert new_draw(sampled, 1).agent.posterior.draw == 0 and new_draw(sampled, 3).agent.posterior.draw == 2
    greedy = settings_for(crl_home, memory=False)
    assert new_draw(greedy, 3) is greedy
    assert PosteriorConfig().rng("keyroom/key", 7, 3).random() == random.Random("keyroom/key:7:3").random()
    probs = {f"action {i}": 0.1 for i in range(10)}
    draws = {
        d: [
            decide(probs, {}, PosteriorConfig(mode="sample", draw=d), PosteriorConfig(draw=d).rng("t", s, 0)).chosen
            for s in range(20)
        ]
        for d in (0, 0, 1)
    }
    again = [
        decide(probs, {}, PosteriorConfig(mode="sample"), PosteriorConfig().rng("t", s, 0)).chosen for s in range(20)
    ]
    assert draws[0] == again and draws[1] != draws[0]


def test_a_mismatched_first_attempt_is_refused_before_the_model_loads(crl_home, monkeypatch):
    from crl.agent.app import start_run

    settings = settings_for(crl_home, memory=False)
    first = start_run(settings, "keyroom/key", 1, fold="dev", kind="eval", model=looker())

    def no_model(_settings):
        raise AssertionError("the model was loaded before the first attempt was checked")

    monkeypatch.setattr("crl.agent.retries.acting_model", no_model)
    with pytest.raises(ValueError, match=r"task keyroom/key \(here keyroom/door\)"):
        evaluate_with_retries(settings, "keyroom/door", 1, 2, first=first.info.run_id)


class KillAfter(ScriptedModel):
    """Raises KeyboardInterrupt on scoring call number `n` (as a killed process would stop)."""

    def __init__(self, replies, n):
        super().__init__(replies)
        self.n = n

    def score_actions(self, *args, **kwargs):
        if len(self.calls) >= self.n:
            raise KeyboardInterrupt
        return super().score_actions(*args, **kwargs)


def test_resume_keeps_finished_retries_and_continues_an_interrupted_one(crl_home):
    from crl.agent.app import start_run
    from crl.agent.runs import RunStore

    settings = settings_for(crl_home, memory=True)
    first = start_run(settings, "keyroom/key", 1, fold="dev", kind="eval", model=looker()).info.run_id
    reference = evaluate_with_retries(settings, "keyroom/key", 1, 3, model=looker(), first=first)
    assert reference.report()["first_win"][str(SEED)] == 2
    killer = KillAfter(lambda messages: json.dumps({"look": 0.0} | {a: -1.0 for a in PLAN}), 0)
    with pytest.raises(KeyboardInterrupt):
        evaluate_with_retries(settings, "keyroom/key", 1, 3, model=killer, first=first)
    series = crl_home / "retries" / f"{first}-2"
    [cut] = RunStore(series / "evals").list()
    assert cut.status == "interrupted" and not any(e.finished for e in RunStore(series / "evals").episodes(cut.run_id))

    resumed = evaluate_with_retries(settings, "keyroom/key", 1, 3, model=looker(), first=first, resume=True)
    assert resumed.scratch_home == series and [a.info.run_id for a in resumed.attempts] == [first, cut.run_id]
    retry = resumed.attempts[1].episodes[0]
    assert retry.success and len(retry.steps) == len(reference.attempts[1].episodes[0].steps)
    assert not (crl_home / "retries" / f"{first}-3").exists(), "resuming makes no new series"
    again = evaluate_with_retries(settings, "keyroom/key", 1, 3, model=looker(), first=first, resume=True)
    assert [a.info.run_id for a in again.attempts] == [first, cut.run_id], "a finished retry is kept, not replayed"


def test_resume_starts_retries_never_started_and_needs_the_first_attempt(crl_home):
    from crl.agent.app import start_run

    settings = settings_for(crl_home, memory=True)
    first = start_run(settings, "keyroom/key", 1, fold="dev", kind="eval", model=looker()).info.run_id
    started = evaluate_with_retries(settings, "keyroom/key", 1, 2, model=looker(), first=first, resume=True)
    assert started.scratch_home == crl_home / "retries" / first, "nothing to resume: the retries start"
    assert started.report()["first_win"][str(SEED)] == 2
    with pytest.raises(ValueError, match="--first"):
        evaluate_with_retries(settings, "keyroom/key", 1, 2, model=looker(), resume=True)
    result = CliRunner().invoke(app, ["eval", "keyroom/key", "--attempts", "2", "--resume"], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "--first" in result.output


def test_retries_read_only_the_attempts_by_default_and_the_bank_on_request(crl_home):
    from crl.agent.app import start_run

    settings = settings_for(crl_home, memory=True)
    start_run(settings, "keyroom/door", 1, model=looker())
    banked = stored_episodes(settings)
    assert banked == 1
    both = evaluate_with_retries(settings, "keyroom/key", 1, 2, model=looker(), retry_memory="bank")
    only = evaluate_with_retries(settings, "keyroom/key", 1, 2, model=looker())
    assert only.report()["retry_memory"] == "attempts" and both.report()["retry_memory"] == "bank"
    assert stored_episodes(settings.model_copy(update={"home": both.scratch_home})) == banked + 1
    assert stored_episodes(settings.model_copy(update={"home": only.scratch_home})) == 1, "attempt 1, no bank episode"
    assert only.report()["first_win"][str(SEED)] == 2, "the world's own lost try is enough to win the retry"
    with pytest.raises(ValueError, match="retry memory"):
        check_retries(settings, 2, "everything")
    first = only.attempts[0].info.run_id
    with pytest.raises(ValueError, match="--retry-memory attempts"):
        evaluate_with_retries(
            settings, "keyroom/key", 1, 3, model=looker(), first=first, resume=True, retry_memory="bank"
        )


def test_a_registered_adapter_of_a_copied_data_directory_is_the_same_adapter():
    from pathlib import Path

    from crl.agent.retries import same_registered

    old, new = Path("/old/home/adapters/sft-1/adapter"), Path("/new/home/adapters/sft-1/adapter")
    assert same_registered(old, new)
    assert not same_registered(old, Path("/new/home/adapters/sft-2/adapter"))
    assert not same_registered(Path("/old/runs/sft-1/adapter"), Path("/new/runs/sft-1/adapter"))
    assert not same_registered(old, None) and not same_registered(None, None)


def test_the_model_alone_retried_with_memory_of_its_own_attempts(crl_home):
    """Attempt 1 played without memory is retried reading only the attempts (Reflexion's protocol):
    the looker's loss is stored and the retry, steered by it, wins; reading the bank instead is
    refused, since attempt 1 read none, and so is the other way round (memory on attempt 1 only)."""
    from crl.agent.app import start_run

    model = looker()
    alone = start_run(settings_for(crl_home, memory=False), "keyroom/key", 1, fold="dev", kind="eval", model=model)
    assert not alone.episodes[0].success
    settings = settings_for(crl_home, memory=True)
    with pytest.raises(ValueError, match="memory.enabled False"):
        evaluate_with_retries(settings, "keyroom/key", 1, 2, model=model, first=alone.info.run_id, retry_memory="bank")
    result = evaluate_with_retries(settings, "keyroom/key", 1, 2, model=model, first=alone.info.run_id)
    report = result.report()
    assert [a["memory"] for a in report["attempts"]] == [False, True]
    assert report["first_win"][str(SEED)] == 2
    assert stored_episodes(settings.model_copy(update={"home": result.scratch_home})) == 1
    assert stored_episodes(settings) == 0
    with_memory = start_run(settings, "keyroom/key", 1, fold="dev", kind="eval", model=model)
    alone_after = settings_for(crl_home, memory=False)
    with pytest.raises(ValueError, match="memory.enabled True"):
        evaluate_with_retries(alone_after, "keyroom/key", 1, 2, model=model, first=with_memory.info.run_id)


def test_retries_of_a_logged_first_attempt_that_read_only_attempts_leave_a_busy_bank_alone(crl_home, monkeypatch):
    """The user's bank in use by another process does not stop retries that never open it (attempt 1
    read from its log, retries reading only the attempts); reading the bank, they are refused."""
    import crl.agent.app
    from crl.agent.app import start_run
    from crl.memory.storage.locks import StoreLock

    monkeypatch.setattr(crl.agent.app, "build_chat_model", lambda settings: looker())
    first = start_run(settings_for(crl_home, memory=True), "keyroom/key", 1, fold="dev", kind="eval", model=looker())
    lock = StoreLock(crl_home / "memory")
    args = ["eval", "keyroom/key", "--policy", "posterior", "--memory", "off", "-k", "1"]
    args += ["--max-steps", str(2 * len(PLAN) - 1), "--attempts", "2", "--first", first.info.run_id, "--json"]
    env = {"COLUMNS": "200", "CRL_AGENT__LOOP_BREAKER": "false", "CRL_REFLECT__ENABLED": "false"}
    try:
        ok = CliRunner().invoke(app, args, env=env)
        busy = CliRunner().invoke(app, [*args, "--retry-memory", "bank"], env=env)
    finally:
        lock.release()
    assert ok.exit_code == 0, ok.output
    report = json.loads(ok.stdout)
    assert report["retry_memory"] == "attempts" and report["first_win"][str(SEED)] == 2
    assert busy.exit_code != 0 and "in use by" in busy.output
