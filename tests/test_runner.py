"""The agent loop and the parallel runner, driven by a scripted model on keyroom."""

from __future__ import annotations

import json

import pytest

from crl.agent.app import resume_run, start_run
from crl.agent.config import load_settings
from crl.agent.llm.scripted import ScriptedModel
from crl.agent.runs import RunStore
from crl.memory.storage.episode_log import EpisodeLog, read_episodes
from crl.tasks.keyroom import solve
from crl.tasks.registry import fold_seeds


def settings_for(home, **agent):
    """Settings for the generating loop these tests exercise (the llm policy, ReAct replies)."""
    agent.setdefault("reply_format", "react")
    agent.setdefault("policy", "llm")
    return load_settings({"home": str(home), "agent": agent, "memory": {"enabled": False}})


def solver_replies(task: str, seeds: list[int]) -> list[str]:
    variant = task.split("/")[1]
    return [f" I know the way.\nAction: {a}" for s in seeds for a in solve(s, variant)]


def test_solver_script_wins_every_episode_and_logs_every_step(crl_home):
    task, n = "keyroom/key", 3
    seeds = fold_seeds(task, "train", n)
    model = ScriptedModel(solver_replies(task, seeds))
    result = start_run(settings_for(crl_home, parallel=1), task, n, model=model)
    assert [e.success for e in result.episodes] == [True] * n
    assert all(e.status == "done" for e in result.episodes)
    events = [
        json.loads(line) for line in RunStore(crl_home / "runs").log_path(result.info.run_id).read_text().splitlines()
    ]
    kinds = [ev["event"] for ev in events]
    assert kinds.count("start") == n and kinds.count("end") == n
    starts = [ev for ev in events if ev["event"] == "start"]
    assert len({ev["game"] for ev in starts}) == n  # the game each seed started (`crl compare` counts games)
    assert [e.game for e in RunStore(crl_home / "runs").episodes(result.info.run_id)] == [ev["game"] for ev in starts]
    assert kinds.count("step") == sum(len(solve(s, "key")) for s in seeds)
    first = result.episodes[0].steps[0]
    assert first.thought == "I know the way." and first.valid and first.decided_by == "llm"
    assert first.raw_output.startswith("Thought:")
    report = result.report()
    assert report["success_rate"] == 1.0 and report["invalid_action_rate"] == 0.0


def test_parallel_episodes_are_batched_and_truncated_by_max_steps(crl_home):
    model = ScriptedModel(lambda msgs: " wait.\nAction: look")
    settings = settings_for(crl_home, parallel=4, max_steps=4, loop_breaker=False)
    result = start_run(settings, "keyroom/compound", 6, model=model)
    sizes = [len(c.batch) for c in model.calls]
    assert sizes[0] == 4 and max(sizes) == 4 and sum(sizes) == 6 * 4
    assert len(result.episodes) == 6
    for e in result.episodes:
        assert e.status == "truncated" and "max_steps" in e.end_reason and len(e.steps) == 4
    # "look" leaves the room as it was (only the line above it changes): the second look repeats it
    assert result.episodes[0].steps[0].extra.repeat is None
    assert result.episodes[0].steps[1].extra.repeat == 1
    assert "already did 'look'" in model.calls[2].batch[0][1]["content"]


def test_loop_breaker_replaces_a_repeated_reply_with_an_untried_action(crl_home):
    model = ScriptedModel(lambda msgs: " x\nAction: inventory")
    result = start_run(settings_for(crl_home, parallel=1, max_steps=4), "keyroom/compound", 1, model=model)
    steps = result.episodes[0].steps
    assert steps[0].action == "inventory" and steps[0].decided_by == "llm"
    # "inventory" does not change the room, so the same reply again is a loop
    broken = [s for s in steps[1:] if s.decided_by == "loop-breaker"]
    assert broken and all(s.extra.loop_break.replaced == "inventory" for s in broken)
    assert all(s.action != "inventory" and s.action in s.admissible_actions for s in broken)
    again = start_run(settings_for(crl_home, parallel=1, max_steps=4), "keyroom/compound", 1, model=model)
    assert [s.action for s in again.episodes[0].steps] == [s.action for s in steps]
    assert result.report()["loop_breaks"] == len(broken)


def test_unparseable_replies_cost_a_step_with_feedback(crl_home):
    model = ScriptedModel(lambda msgs: " ???\nAction: fly to the moon")
    result = start_run(
        settings_for(crl_home, parallel=2, max_steps=2, loop_breaker=False), "keyroom/key", 2, model=model
    )
    for e in result.episodes:
        assert [s.valid for s in e.steps] == [False, False]
        assert e.steps[0].extra.feedback
    assert "not a valid action" in model.calls[1].batch[0][1]["content"]
    assert result.report()["invalid_action_rate"] == 1.0


def test_token_budget_guard(crl_home):
    model = ScriptedModel(lambda msgs: " x\nAction: look")
    result = start_run(settings_for(crl_home, parallel=1, max_episode_tokens=50), "keyroom/compound", 1, model=model)
    ep = result.episodes[0]
    assert ep.status == "truncated" and "token budget" in ep.end_reason
    assert len(ep.steps) < 25


def test_wall_clock_guard(crl_home):
    model = ScriptedModel(lambda msgs: " x\nAction: look")
    result = start_run(settings_for(crl_home, parallel=1, max_episode_seconds=0.0), "keyroom/key", 1, model=model)
    assert "wall clock" in result.episodes[0].end_reason and len(result.episodes[0].steps) == 1


class KillAfter(ScriptedModel):
    """Raises KeyboardInterrupt on call number `n` (as a killed process would stop)."""

    def __init__(self, replies, n):
        super().__init__(replies)
        self.n = n

    def generate(self, batch, config):
        if len(self.calls) >= self.n:
            raise KeyboardInterrupt
        return super().generate(batch, config)


def test_resume_continues_an_interrupted_run_without_duplicates(crl_home):
    task, n = "keyroom/compound", 3
    seeds = fold_seeds(task, "train", n)
    plans = {s: solve(s, "compound") for s in seeds}
    replies = solver_replies(task, seeds)
    cut = len(plans[seeds[0]]) + 2
    settings = settings_for(crl_home, parallel=1)
    with pytest.raises(KeyboardInterrupt):
        start_run(settings, task, n, model=KillAfter(replies, cut))
    run_id = RunStore(crl_home / "runs").list()[0].run_id
    logged = RunStore(crl_home / "runs").episodes(run_id)
    assert [e.finished for e in logged] == [True, False]
    assert len(logged[1].steps) == 2
    result = resume_run(settings, run_id, model=ScriptedModel(replies[cut:]))
    eps = {e.episode_id: e for e in result.episodes}
    assert len(eps) == n and all(e.success for e in eps.values())
    resumed = eps[f"{run_id}-0001"]
    assert [s.action for s in resumed.steps] == plans[seeds[1]]
    assert [s.index for s in resumed.steps] == list(range(len(plans[seeds[1]])))
    assert RunStore(crl_home / "runs").load(run_id).status == "finished"


class AdapterModel(KillAfter):
    """A scripted model that says it runs with a LoRA adapter, as `LocalChatModel` does."""

    adapter = "/adapters/sft-1/adapter"


def test_a_run_records_the_adapter_its_model_loaded_and_resumes_with_it(crl_home, monkeypatch):
    task, n = "keyroom/key", 2
    seeds = fold_seeds(task, "train", n)
    replies = solver_replies(task, seeds)
    settings = settings_for(crl_home, parallel=1)
    with pytest.raises(KeyboardInterrupt):
        start_run(settings, task, n, model=AdapterModel(replies, 1))
    store = RunStore(crl_home / "runs")
    run_id = store.list()[0].run_id
    assert store.load(run_id).adapter == AdapterModel.adapter
    assert [e.adapter for e in store.episodes(run_id)] == [AdapterModel.adapter]

    built = []

    def build(resumed_settings):
        built.append(resumed_settings.llm.adapter)
        return ScriptedModel(replies[1:])

    monkeypatch.setattr("crl.agent.app.build_chat_model", build)
    result = resume_run(settings, run_id)
    assert built == [AdapterModel.adapter], (
        "the resumed run loads the adapter it started with, not today's promoted one"
    )
    assert all(e.success for e in result.episodes)


def test_torn_tail_is_repaired_on_reopen(tmp_path):
    path = tmp_path / "episodes.jsonl"
    path.write_text(
        '{"event": "start", "episode_id": "e1", "run_id": "r", "task": "keyroom/key", "seed": 1, "goal": "g"}\n{"event": "step", "episode_id": "e1", "ind'
    )
    log = EpisodeLog(path)
    assert log.repaired_bytes > 0
    log.close()
    assert path.read_text().endswith("}\n")
    eps = read_episodes(path)
    assert len(eps) == 1 and eps[0].steps == [] and not eps[0].finished


def test_unknown_task_and_bad_knob_are_clear_errors(crl_home):
    with pytest.raises(ValueError, match="Known tasks"):
        start_run(settings_for(crl_home), "nosuch/task", 1, model=ScriptedModel([]))


def test_action_only_format_primes_with_action_marker(crl_home):
    model = ScriptedModel(lambda msgs: " look")
    result = start_run(settings_for(crl_home, reply_format="action", max_steps=1), "keyroom/key", 1, model=model)
    messages = model.calls[0].batch[0]
    assert messages[-1] == {"role": "assistant", "content": "Action:"}
    assert "'Action:' followed by one valid action" in messages[0]["content"]
    step = result.episodes[0].steps[0]
    assert step.raw_output == "Action: look" and step.action == "look" and step.thought == ""


def test_backend_without_prefill_gets_no_primed_message(crl_home):
    model = ScriptedModel(lambda msgs: "Thought: hm\nAction: look", supports_prefill=False)
    result = start_run(settings_for(crl_home, max_steps=1), "keyroom/key", 1, model=model)
    assert model.calls[0].batch[0][-1]["role"] == "user"
    step = result.episodes[0].steps[0]
    assert step.raw_output == "Thought: hm\nAction: look" and step.thought == "hm"


def test_reply_format_auto_uses_action_only_for_the_embedded_model(crl_home):
    from crl.agent.app import uses_react

    generating = {"policy": "llm"}
    assert uses_react(load_settings({"home": str(crl_home), "agent": generating})) is False
    other = {"home": str(crl_home), "agent": generating, "llm": {"model": "some/other-model"}}
    assert uses_react(load_settings(other)) is True
    assert uses_react(load_settings(other | {"agent": {"policy": "posterior"}})) is False  # scored after `Action:`


def test_run_stores_experience_and_eval_keeps_out_of_memory(crl_home):
    from crl.agent.app import open_bank

    settings = load_settings({"home": str(crl_home), "agent": {"reply_format": "action", "max_steps": 2}})
    start_run(settings, "keyroom/key", 2, model=ScriptedModel(lambda msgs: " look"))
    start_run(settings, "keyroom/key", 1, fold="dev", kind="eval", model=ScriptedModel(lambda msgs: " look"))
    with open_bank(settings) as bank:
        episodes = bank.ls(kind="episode")
        assert len(episodes) == 2
        assert {e.seed for e in episodes} == set(fold_seeds("keyroom/key", "train", 2))


class CrashingEnv:
    """Keyroom whose engine 'crashes' on the first reset of seed 1 and on a step of seed 2."""

    crashes = {"reset": 1, "step": 1}

    def __init__(self):
        from crl.tasks.keyroom import KeyroomEnv

        self.inner = KeyroomEnv("key")
        self.name = "keyroom/key"
        self.seed = None

    def reset(self, seed):
        self.seed = seed
        if seed == 1 and self.crashes["reset"]:
            self.crashes["reset"] -= 1
            raise RuntimeError("engine died on reset")
        return self.inner.reset(seed)

    def step(self, action):
        if self.seed == 2 and self.crashes["step"]:
            self.crashes["step"] -= 1
            raise RuntimeError("engine died on step")
        return self.inner.step(action)

    def close(self):
        pass


def test_engine_errors_mark_the_episode_errored_and_retry_it_once(crl_home, monkeypatch):
    import crl.agent.app

    monkeypatch.setattr(crl.agent.app, "make_env", lambda name: CrashingEnv())
    model = ScriptedModel(lambda msgs: " look")
    result = start_run(settings_for(crl_home, parallel=1, max_steps=2), "keyroom/key", 3, model=model)
    by_id = {e.episode_id: e for e in result.episodes}
    run_id = result.info.run_id
    assert by_id[f"{run_id}-0001"].status == "error" and "reset" in by_id[f"{run_id}-0001"].end_reason
    assert by_id[f"{run_id}-0002"].status == "error" and "step" in by_id[f"{run_id}-0002"].end_reason
    assert by_id[f"{run_id}-0001-retry"].status == "truncated"
    assert by_id[f"{run_id}-0002-retry"].status == "truncated"
    report = result.report()
    assert report["errored"] == 2 and report["episodes"] == 3
