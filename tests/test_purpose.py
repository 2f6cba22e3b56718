"""Skill-conditioned experience: each step's purpose, its value as the episode of that purpose, and
the posterior reading door-task experience in a compound game's door phase (never key moves on the chest)."""

from __future__ import annotations

import json

from crl.agent.app import start_run
from crl.agent.config import load_settings
from crl.agent.llm.scripted import ScriptedModel
from crl.memory.ingest import EpisodeTags, build_records
from crl.memory.purpose import given_subgoals, own_skill, purpose_now, purpose_view, step_purposes
from crl.memory.retrieval.config import RetrievalConfig
from crl.memory.retrieval.episodic_control import memory_advantages
from crl.memory.trajectory import Episode, Step
from crl.tasks.keyroom import KeyroomEnv, solve
from crl.tasks.registry import fold_seeds


def played(variant: str, seed: int, actions: list[str] | None = None) -> Episode:
    """An episode of keyroom/`variant` on `seed` playing `actions` (default: the solver's), with
    the environment's own infos."""
    env = KeyroomEnv(variant)
    obs = env.reset(seed)
    episode = Episode(episode_id=f"{variant}-{seed}", run_id="r", task=f"keyroom/{variant}", seed=seed, goal=obs.goal)
    for i, action in enumerate(actions if actions is not None else solve(env, None)):
        nxt, reward, done, info = env.step(action)
        episode.steps.append(
            Step(index=i, observation=obs.text, action=action, reward=reward, done=done, info=dict(info))
        )
        obs = nxt
        if done:
            break
    episode.success = bool(episode.steps and episode.steps[-1].done and episode.steps[-1].reward > 0)
    episode.status = "finished"
    return episode


def records(episode: Episode):
    """The step records ingest stores for `episode`."""
    n = len(episode.steps)
    return build_records(episode, EpisodeTags([0.0] * n, [0.0] * n, 0.0), 2, now=1.0)[1]


def test_each_task_says_what_its_steps_work_toward():
    assert own_skill("keyroom/door") == "door" and own_skill("keyroom/compound?n_rooms=3") is None
    assert given_subgoals("keyroom/door") == ("key",) and given_subgoals("keyroom/key") == ()
    assert purpose_now("keyroom/compound", []) == "key"
    assert purpose_now("keyroom/compound", {"key", "door"}) == "chest"
    assert purpose_now("keyroom/chest", []) == "chest"
    assert purpose_now("twx/coin", ["score_1"]) is None


def test_a_compound_episode_is_cut_into_the_purposes_of_its_steps():
    ep = played("compound", 7)
    purposes = step_purposes(ep.task, [s.info for s in ep.steps])
    actions = [s.action for s in ep.steps]
    first_door = next(i for i, a in enumerate(actions) if a.startswith("take") and "key" in a) + 1
    assert [p for p, _ in purposes[:first_door]] == ["key"] * first_door
    assert purposes[actions.index("open door")] == ("door", 0)
    assert purposes[actions.index("open door") + 1][0] == "chest"
    assert purposes[-1] == ("chest", 0)
    assert purposes[first_door][1] == actions.index("open door") - first_door


def test_sub_goals_given_at_the_start_are_no_step_s_achievement():
    ep = played("door", 7)
    steps = records(ep)
    assert steps[0].skills == [] and steps[-1].skills == ["door"]
    assert steps[0].subgoal_in == len(steps) - 1  # not 0: the key was in hand before step 0
    assert {s.purpose for s in steps} == {"door"} and steps[0].purpose_in == len(steps) - 1


def test_a_failed_compound_episode_that_opened_the_door_is_a_door_success_for_its_door_steps():
    ep = played("compound", 7)
    opened = [s.action for s in ep.steps].index("open door")
    ep = played("compound", 7, [s.action for s in ep.steps[: opened + 1]] + ["look"] * 3)
    assert not ep.success
    steps = records(ep)
    door_step = purpose_view(steps[opened])
    assert door_step.episode_outcome == "success" and door_step.steps_to_end == 0
    chest_step = purpose_view(steps[-1])
    assert chest_step.purpose == "chest" and chest_step.episode_outcome == "failure"


def test_door_experience_votes_on_the_door_phase_and_key_experience_never_on_the_chest():
    door_ep, key_ep = played("door", 7), played("key", 7)
    door_steps = records(door_ep)
    key_steps = records(key_ep)
    neighbours = [(s, 0.9) for s in door_steps + key_steps]
    cfg = RetrievalConfig()
    by_task = memory_advantages(neighbours, ["open door", "examine door"], cfg, task="keyroom/compound")
    by_purpose = memory_advantages(neighbours, ["open door", "examine door"], cfg, purpose="door")
    assert by_task == {}
    assert by_purpose["open door"].n == 1 and by_purpose["open door"].q > 0
    key_action = key_ep.steps[-1].action
    assert memory_advantages(neighbours, [key_action], cfg, purpose="chest") == {}


def settings_for(home, condition: str):
    return load_settings(
        {
            "home": str(home),
            "agent": {
                "policy": "posterior",
                "parallel": 1,
                "memory": "off",
                "frontier": False,  # the loop rules alone would reach the door: this is about memory
                "posterior": {"condition": condition},
            },
            "reflect": {"enabled": False},
        }
    )


def test_the_posterior_opens_the_door_in_a_compound_game_from_door_task_experience(tmp_path):
    """A model that takes the key but prefers examining the door to unlocking it: after one solved
    door-task game on the same world, conditioning on purpose opens the door in the compound game;
    conditioning on the task (no compound experience) leaves the model's choice."""
    seed = fold_seeds("keyroom/compound", "train", 1)[0]
    plan = solve(seed, "compound")
    prefs = {a: 0.0 for a in plan if not a.startswith(("unlock", "open door"))} | {"examine door": -0.5}
    prefs |= {a: -1.5 for a in plan if a.startswith(("unlock", "open door"))}
    reached = {}
    for condition in ("task", "purpose"):
        settings = settings_for(tmp_path / condition, condition)
        start_run(settings, "keyroom/door", 1, model=ScriptedModel([f" {a}" for a in solve(seed, "door")]))
        model = ScriptedModel(lambda messages: json.dumps(prefs))
        run = start_run(settings, "keyroom/compound", 1, model=model)
        reached[condition] = run.episodes[0].subgoals
    assert reached["task"].get("key") and not reached["task"].get("door")
    assert reached["purpose"].get("door")


def test_stored_steps_carry_their_purpose_and_a_rebuild_from_the_logs_restores_it(tmp_path):
    from crl.agent.app import open_bank

    settings = settings_for(tmp_path, "purpose")
    seed = fold_seeds("keyroom/door", "train", 1)[0]
    start_run(settings, "keyroom/door", 1, model=ScriptedModel([f" {a}" for a in solve(seed, "door")]))
    with open_bank(settings) as bank:
        before = {r.id: (r.purpose, r.purpose_in) for r in bank.ls(kind="step")}
        bank.rebuild()
        after = {r.id: (r.purpose, r.purpose_in) for r in bank.ls(kind="step")}
        door = bank.query_steps("keyroom", [bank.ls(kind="step")[0].text], k=5, purpose="door")[0]
        key = bank.query_steps("keyroom", [bank.ls(kind="step")[0].text], k=5, purpose="key")[0]
    n = len(before)
    assert n and before == after
    assert sorted(before.values(), key=lambda p: -p[1]) == [("door", n - 1 - i) for i in range(n)]
    assert len(door) == n and key == []
