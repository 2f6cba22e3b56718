"""The posterior policy in the agent loop: scored actions, memory's advantages, repeats avoided."""

from __future__ import annotations

import json
import random

import pytest

from crl.agent.app import start_run, uses_react
from crl.agent.config import load_settings
from crl.agent.llm.scripted import SCRIPTED_MISS_LOGPROB, ScriptedModel
from crl.agent.posterior import PosteriorConfig, decide
from crl.memory.retrieval.episodic_control import MemoryAdvantage
from crl.tasks.keyroom import solve
from crl.tasks.registry import fold_seeds


def settings_for(home, bank: bool = False, **agent):
    agent = {"policy": "posterior", "parallel": 1} | agent
    return load_settings(
        {"home": str(home), "agent": agent, "memory": {"enabled": bank}, "reflect": {"enabled": False}}
    )


def looker_after_a_failure_and_a_success(home):
    """A bank holding one failed play of a seed (a model that prefers looking around, by one nat)
    and one solved play; returns the settings, that looking model and the solved run."""
    plan = solve(fold_seeds("keyroom/key", "train", 1)[0], "key")
    # loop_breaker off: looking again must stay possible (it is a no-op the loop breaker would rule out)
    mem = settings_for(home, bank=True, memory="off", max_steps=len(plan) + 2, loop_breaker=False)
    looker = ScriptedModel(lambda messages: json.dumps({"look": 0.0} | {a: -1.0 for a in plan}))
    # a second "look" in the same room is passed over for the plan's next move, so the looker
    # needs two steps per room: one step short of that, it fails, having looked in both rooms
    short = mem.model_copy(update={"agent": mem.agent.model_copy(update={"max_steps": 2 * len(plan) - 1})})
    start_run(short, "keyroom/key", 1, model=looker)
    solved = start_run(mem, "keyroom/key", 1, model=ScriptedModel([f" {a}" for a in plan]))
    return mem, looker, solved


def test_scripted_scores_prefer_the_scripted_action_and_accept_exact_tables():
    model = ScriptedModel([" Action: take key", json.dumps({"look": -1.0, "go north": -2.0})])
    dists = model.score_actions(
        [[{"role": "user", "content": "a b"}]] * 2, [["look", "take key"], ["look", "go north"]]
    )
    assert dists[0].best == "take key" and dists[0].scores[0].mean_logprob == SCRIPTED_MISS_LOGPROB
    assert dists[1].probs == pytest.approx([0.7311, 0.2689], abs=1e-4)
    assert dists[0].prompt_tokens == 2 and len(model.calls) == 1


def test_the_posterior_policy_scores_instead_of_generating(crl_home):
    seeds = fold_seeds("keyroom/key", "train", 3)
    model = ScriptedModel([f" {a}" for s in seeds for a in solve(s, "key")])
    result = start_run(settings_for(crl_home), "keyroom/key", 3, model=model)
    assert result.summary.successes == 3
    steps = [st for ep in result.episodes for st in ep.steps]
    assert all(st.valid for st in steps)
    assert {st.decided_by for st in steps} == {"llm"}
    first = steps[0]
    assert first.extra.policy.posterior["chosen"] == first.action
    assert set(first.extra.policy.posterior["actions"]) == set(first.admissible_actions)
    assert all(call.config.max_new_tokens == 0 for call in model.calls)  # scored, never generated
    assert result.stats.scored_decisions == len(steps)
    assert result.info.scoring == {"method": "log-likelihood", "where": "ScriptedModel"}


def test_a_repeated_argmax_is_avoided_by_the_posterior_not_replaced_at_random(crl_home):
    model = ScriptedModel(lambda messages: json.dumps({"look": 0.0, "inventory": -1.0}))
    result = start_run(settings_for(crl_home, max_steps=4), "keyroom/key", 1, model=model)
    steps = result.episodes[0].steps
    assert steps[0].action == "look" and steps[0].decided_by == "llm"
    pairs = [(st.observation, st.action) for st in steps]
    assert len(set(pairs)) == len(pairs)  # never the same action twice in the same situation
    avoided = [st for st in steps if st.decided_by == "repeat-avoidance"]
    assert avoided and avoided[0].action == "inventory"
    assert avoided[0].extra.policy.posterior["avoided"] == ["look"] and avoided[0].extra.loop_break is None


def test_an_action_that_changed_nothing_is_not_repeated_while_nothing_changes(crl_home):
    """`examine` and `look` leave the room as it was: with the loop breaker (the default) the
    posterior passes over them in the same situation, though the feedback above the room differs."""
    prefs = {"examine door": 0.0, "look": -0.2, "inventory": -0.4}
    model = ScriptedModel(lambda messages: json.dumps(prefs))
    steps = start_run(settings_for(crl_home, max_steps=6), "keyroom/door", 1, model=model).episodes[0].steps
    assert [st.action for st in steps[:3]] == ["examine door", "look", "inventory"]
    assert steps[3].action not in prefs  # every no-op passed over while the room stays as it was
    off = start_run(settings_for(crl_home, max_steps=6, loop_breaker=False), "keyroom/door", 1, model=model)
    repeated = [st.action for st in off.episodes[0].steps]
    assert repeated.count("examine door") > 1


def test_memory_overrides_the_model_where_it_knows_better(crl_home):
    """A third play of the seed by the looking model is steered onto the solver's moves by memory's advantages."""
    mem, looker, _ = looker_after_a_failure_and_a_success(crl_home)
    again = start_run(mem, "keyroom/key", 1, model=looker)
    ep = again.episodes[0]
    assert ep.success
    overrides = [st for st in ep.steps if st.extra.policy.posterior["memory_changed_argmax"]]
    assert overrides and overrides[0].decided_by == "memory"
    evidence = overrides[0].extra.policy.posterior["actions"][overrides[0].action]["memory"]
    assert evidence["advantage"] > 0 and evidence["support"] > 0


def test_posterior_prompts_are_primed_with_action_not_thought(crl_home):
    assert uses_react(load_settings({"agent": {"policy": "posterior", "reply_format": "react"}})) is False
    assert uses_react(load_settings({"agent": {"policy": "mixed", "reply_format": "react"}})) is True


def test_decide_chooses_among_untried_actions_and_keeps_the_posterior():
    probs = {"look": 0.7, "take key": 0.2, "go north": 0.1}
    d = decide(probs, {}, PosteriorConfig(), avoid={"look"})
    assert d.chosen == "take key" and d.avoided == ["look"] and d.decided_by == "repeat-avoidance"
    assert d.posterior == pytest.approx([0.7, 0.2, 0.1])
    every = decide(probs, {}, PosteriorConfig(), avoid=set(probs))
    assert every.chosen == "look" and every.avoided == []
    memory = {"go north": MemoryAdvantage("go north", q=1.0, baseline=0.0, support=3.0)}
    steered = decide(probs, memory, PosteriorConfig(), avoid={"look"})
    assert steered.chosen == "go north" and steered.decided_by == "memory"
    sampled = decide(probs, {}, PosteriorConfig(mode="sample"), random.Random(0), avoid={"look"})
    assert sampled.chosen != "look"


def test_where_every_action_was_tried_the_least_taken_is_chosen_not_the_argmax():
    probs = {"look": 0.7, "take key": 0.2, "go north": 0.1}
    d = decide(probs, {}, PosteriorConfig(), avoid={"look": 3, "take key": 1, "go north": 1})
    assert d.chosen == "take key" and d.avoided == ["look"] and d.decided_by == "repeat-avoidance"
    level = decide(probs, {}, PosteriorConfig(), avoid=dict.fromkeys(probs, 2))
    assert level.chosen == "look" and level.avoided == []
    fresh = decide(probs, {}, PosteriorConfig(), avoid={"look": 5})
    assert fresh.chosen == "take key" and fresh.avoided == ["look"]


def test_a_situation_whose_every_action_was_tried_cycles_instead_of_looping(crl_home, monkeypatch):
    """One unchanging room; ringing the bell twice wins. A model that prefers looking tries all
    three actions once, then must not look forever: the least-taken action comes next."""
    from crl.tasks import registry
    from crl.tasks.user_task import UserTask

    class Bell(UserTask):
        name = "bell/twice"
        max_steps = 12

        def reset(self, seed):
            self.rings = 0
            return self.observe("A quiet room with a bell.", goal="Ring the bell twice.", actions=self.actions())

        @staticmethod
        def actions():
            return ["look", "wait", "ring bell"]

        def step(self, action):
            self.rings += action == "ring bell"
            if self.rings == 2:
                return self.finish("The bell rings again. Done.", success=True)
            return self.proceed("A quiet room with a bell.", actions=self.actions())

    monkeypatch.setitem(registry._TASKS, Bell.name, Bell.spec())
    model = ScriptedModel(lambda messages: json.dumps({"look": 0.0, "wait": -1.0, "ring bell": -3.0}))
    ep = start_run(settings_for(crl_home, max_steps=12, loop_breaker=False), "bell/twice", 1, model=model).episodes[0]
    assert ep.success
    assert [st.action for st in ep.steps] == ["look", "wait", "ring bell", "look", "wait", "ring bell"]


def test_the_run_report_counts_memory_overrides_and_explain_shows_the_posterior(crl_home):
    from rich.console import Console

    from crl.agent.explain import render_explanation

    mem, looker, _ = looker_after_a_failure_and_a_success(crl_home)
    report = start_run(mem, "keyroom/key", 1, model=looker).report()
    assert report["memory_overrides"] >= 1 and report["override_win_rate"] == 1.0
    assert 0 < report["override_rate"] <= 1
    console = Console(record=True, width=160)
    result = start_run(mem, "keyroom/key", 1, model=looker)
    render_explanation(console, result.episodes[0])
    text = console.export_text()
    assert "posterior (beta 1, alpha 0.25" in text and "chosen" in text and "model's argmax" in text


def test_other_actor_weight_zero_keeps_another_actors_experience_out_of_the_decision(crl_home):
    """The same looking model under another name (another actor) replays the seed: with
    `other_actor_weight` 0 the stored plays (by "scripted") give it no advantages, so the model
    decides every step; at the default 1 memory steers it as before."""
    mem, _, _ = looker_after_a_failure_and_a_success(crl_home)
    plan = solve(fold_seeds("keyroom/key", "train", 1)[0], "key")
    stranger = ScriptedModel(
        lambda messages: json.dumps({"look": 0.0} | {a: -1.0 for a in plan}), name="scripted+sft-9"
    )

    def with_weight(w):
        posterior = mem.agent.posterior.model_copy(update={"other_actor_weight": w})
        return mem.model_copy(update={"agent": mem.agent.model_copy(update={"posterior": posterior})})

    alone = start_run(with_weight(0.0), "keyroom/key", 1, model=stranger, kind="eval").episodes[0]
    assert {st.decided_by for st in alone.steps} <= {"llm", "repeat-avoidance"}
    assert all(not st.extra.policy.posterior["actions"][st.action].get("memory") for st in alone.steps)
    steered = start_run(with_weight(1.0), "keyroom/key", 1, model=stranger, kind="eval").episodes[0]
    assert steered.success and any(st.decided_by == "memory" for st in steered.steps)


def test_other_world_weight_zero_lets_only_the_worlds_own_plays_steer(crl_home):
    """With `other_world_weight` 0 the looker replaying the stored seed is steered by that
    world's own plays and wins; on the next seed (another world) memory gives no advantage at all."""
    mem, looker, _ = looker_after_a_failure_and_a_success(crl_home)
    posterior = mem.agent.posterior.model_copy(update={"other_world_weight": 0.0})
    own_only = mem.model_copy(update={"agent": mem.agent.model_copy(update={"posterior": posterior})})
    same = start_run(own_only, "keyroom/key", 1, model=looker, kind="eval").episodes[0]
    assert same.success and any(st.decided_by == "memory" for st in same.steps)
    other = start_run(own_only, "keyroom/key", 1, seed_start=1, model=looker, kind="eval").episodes[0]
    assert other.seed != same.seed
    assert all(not st.extra.policy.posterior["actions"][st.action].get("memory") for st in other.steps)
    assert {st.decided_by for st in other.steps} <= {"llm", "repeat-avoidance"}


def test_the_steps_behind_a_memory_choice_are_credited_when_the_episode_ends(crl_home):
    mem, looker, solved = looker_after_a_failure_and_a_success(crl_home)
    start_run(mem, "keyroom/key", 1, model=looker)
    from crl.agent.app import open_bank

    with open_bank(mem) as bank:
        used = [r for r in bank.ls(kind="step") if r.use_count and r.episode_id == solved.episodes[0].episode_id]
    assert used and all(r.use_successes == r.use_count for r in used)


def test_explore_untried_reaches_the_loop_from_settings(crl_home):
    """After a failed play, `agent.posterior.explore_untried` (the default) steers a replay of the
    seed onto actions no stored step took there (evidence n = 0); with it off, memory never does."""
    plan = solve(fold_seeds("keyroom/key", "train", 1)[0], "key")
    looker = ScriptedModel(lambda messages: json.dumps({"look": 0.0, "inventory": -0.5} | {a: -2.0 for a in plan}))
    mem = settings_for(crl_home, bank=True, memory="off", max_steps=len(plan) + 2, loop_breaker=False)
    # two steps, "look" and "inventory": the plan's first move stays untried in the stored play
    start_run(
        mem.model_copy(update={"agent": mem.agent.model_copy(update={"max_steps": 2})}), "keyroom/key", 1, model=looker
    )

    def untried_choices(settings) -> list:
        ep = start_run(settings, "keyroom/key", 1, model=looker, kind="eval").episodes[0]
        return [
            st
            for st in ep.steps
            if st.decided_by == "memory"
            and st.extra.policy.posterior["actions"][st.action].get("memory", {}).get("n", -1) == 0
        ]

    plain = mem.model_copy(
        update={
            "agent": mem.agent.model_copy(
                update={"posterior": mem.agent.posterior.model_copy(update={"explore_untried": False})}
            )
        }
    )
    assert untried_choices(plain) == []
    chosen = untried_choices(mem)
    assert chosen and chosen[0].extra.policy.posterior["explore_untried"] is True
