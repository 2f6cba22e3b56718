"""The keyroom world: generation, rules, variants, the env contract and the solver."""

from __future__ import annotations

import copy
import pickle
import random
from collections import deque
from dataclasses import replace

import pytest

from crl.tasks.base import FOLDS, TextEnv
from crl.tasks.keyroom import VARIANTS, KeyroomEnv, canonical_action, goal_reached, initial_state, solve, subgoals
from crl.tasks.keyroom_world import (
    IN_CHEST,
    KEY,
    OPPOSITE,
    TREASURE,
    admissible_actions,
    apply_action,
    generate_world,
)
from crl.tasks.registry import get_task, make_env

NAMES = [f"keyroom/{v}" for v in VARIANTS]


def _full_bfs_length(world, start, variant) -> int:
    """Shortest solution length over *every* admissible action, distractors included."""
    seen = {start}
    frontier = deque([(start, 0)])
    while frontier:
        state, depth = frontier.popleft()
        for action in admissible_actions(world, state):
            nxt, _ = apply_action(world, state, action)
            if goal_reached(nxt, variant):
                return depth + 1
            if nxt not in seen:
                seen.add(nxt)
                frontier.append((nxt, depth + 1))
    raise AssertionError("unsolvable")


@pytest.mark.parametrize("name", NAMES)
def test_task_is_registered_with_disjoint_folds(name):
    spec = get_task(name)
    assert spec.family == "keyroom" and spec.description
    assert spec.max_steps == VARIANTS[spec.variant].max_steps
    ranges = [set(spec.folds.get(f)) for f in FOLDS]
    assert all(ranges) and not (ranges[0] & ranges[1] or ranges[0] & ranges[2] or ranges[1] & ranges[2])
    env = make_env(name)
    assert isinstance(env, TextEnv) and env.name == name


@pytest.mark.parametrize("name", NAMES)
def test_solver_wins_every_variant_on_200_seeds(name):
    spec = get_task(name)
    env = make_env(name)
    for seed in range(200):
        env.reset(seed)
        plan = solve(env, None)
        assert 1 <= len(plan) <= spec.max_steps
        for i, action in enumerate(plan):
            obs, reward, done, info = env.step(action)
            assert not info["invalid"]
            last = i == len(plan) - 1
            assert (reward, done, info["success"], info["won"]) == (float(last), last, last, last)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_solver_plans_are_shortest(variant):
    for seed in range(25):
        knobs = {"n_rooms": 2 + seed % 3, "n_distractors": 1}
        plan = solve(seed, variant, **knobs)
        world = generate_world(seed, **knobs)
        assert len(plan) == _full_bfs_length(world, initial_state(world, variant), variant)


def test_solve_from_seed_matches_solve_from_env_and_from_mid_episode():
    env = KeyroomEnv("compound", n_rooms=4)
    env.reset(11)
    plan = solve(env, "keyroom/compound")
    assert plan == solve(11, "compound", n_rooms=4)
    env.step(plan[0])
    assert solve(env, None) == plan[1:]
    with pytest.raises(ValueError, match="not 'key'"):
        solve(env, "key")


def _random_walk(env, seed, steps=12):
    """Yield the env in successive states reached by random admissible actions."""
    rng = random.Random(seed)
    env.reset(seed)
    yield env
    for _ in range(steps):
        action = rng.choice(env.step("look").observation.admissible_actions)
        if env.step(action).done:
            return
        yield env


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_admissible_action_is_accepted_and_junk_changes_nothing(variant):
    env = KeyroomEnv(variant, n_distractors=3)
    for seed in range(15):
        for walked in _random_walk(env, seed):
            env = walked
            before, admissible = env.state, admissible_actions(env.world, env.state)
            assert admissible == sorted(set(admissible))
            for action in admissible:
                assert not copy.deepcopy(env).step(action).info["invalid"], action
            obs, reward, done, info = env.step("xyzzy plugh")
            assert info["invalid"] and reward == 0.0 and not done and not info["success"]
            assert obs.text.startswith("Nothing happens: 'xyzzy plugh' is not a valid action here.")
            assert env.state == before and obs.admissible_actions == admissible


def test_well_formed_but_impossible_actions_are_invalid():
    env = KeyroomEnv("compound", n_rooms=2)
    env.reset(4)
    world = env.world
    missing = next(d for d in OPPOSITE if d not in dict(world.exits[env.state.room]))
    impossible = [
        f"go {world.door_dir}",  # through the locked door
        f"go {missing}",
        "open door",  # locked
        "unlock door",  # no key in hand
        f"drop {world.key_name}",
        "take treasure",
        "open chest",
        "take door",
    ]
    for action in impossible:
        outcome = env.step(action)
        assert outcome.info["invalid"] and outcome.reward == 0.0, action
        assert outcome.info["subgoals"] == {"key": False, "door": False, "chest": False}


def test_actions_are_normalised_and_short_names_resolve():
    env = KeyroomEnv("door", n_rooms=2)
    env.reset(3)
    world = env.world
    assert env.step(f"  EXAMINE   the {world.key_name.upper()}. ").info["action"] == f"examine {world.key_name}"
    assert env.step("unlock door").info["action"] == f"unlock door with {world.key_name}"
    assert env.step(world.door_dir).info["invalid"]  # door still closed
    outcome = env.step("Open the door")
    assert outcome.info["action"] == "open door" and outcome.done and outcome.reward == 1.0
    assert canonical_action("take lamp", ["take red lamp", "take blue lamp"]) is None  # ambiguous
    assert canonical_action("take key", ["take brass key"]) == "take brass key"
    assert canonical_action("go", ["go north"]) is None


def test_generation_is_deterministic_per_seed_and_varies_across_seeds():
    for seed in range(20):
        a, b = KeyroomEnv("compound"), KeyroomEnv("compound")
        assert a.reset(seed) == b.reset(seed)
        assert generate_world(seed) == generate_world(seed)
    worlds = [generate_world(seed) for seed in range(100)]
    assert len({(w.rooms, w.exits, w.items) for w in worlds}) >= 95
    assert {len(w.rooms) for w in worlds} == {2, 3, 4}
    assert len({w.key_name for w in worlds}) >= 4 and len({w.rooms[w.treasure_room] for w in worlds}) >= 8
    assert {len(generate_world(seed, n_rooms=6).rooms) for seed in range(10)} == {6}
    assert {len(generate_world(seed, n_distractors=5).items) for seed in range(10)} == {7}


def test_layout_is_consistent_and_the_treasure_sits_behind_the_door():
    for seed in range(200):
        world = generate_world(seed, n_rooms=2 + seed % 7)
        for room, exits in enumerate(world.exits):
            assert len({d for d, _ in exits}) == len(exits)
            for direction, other in exits:
                assert (OPPOSITE[direction], room) in world.exits[other]
        assert world.exits[world.treasure_room] == ((OPPOSITE[world.door_dir], world.door_room),)
        assert world.treasure_room not in (world.key_room, world.start_room)
        assert world.start_where[TREASURE] == IN_CHEST and world.start_where[KEY] == world.key_room
        if len(world.rooms) > 2:
            assert world.start_room != world.key_room
        names = [item.name for item in world.items]
        assert len(set(names)) == len(names) == 4


def test_variants_start_with_earlier_subgoals_done():
    expected = {
        "key": {"key": False, "door": False, "chest": False},
        "compound": {"key": False, "door": False, "chest": False},
        "door": {"key": True, "door": False, "chest": False},
        "chest": {"key": True, "door": True, "chest": False},
    }
    for variant, reached in expected.items():
        for seed in range(20):
            env = KeyroomEnv(variant)
            env.reset(seed)
            assert env.step("look").info["subgoals"] == reached


def test_compound_reports_subgoals_in_order_along_the_solver_path():
    for seed in range(50):
        env = KeyroomEnv("compound")
        env.reset(seed)
        seen = []
        for action in solve(env, None):
            info = env.step(action).info
            newly = [k for k, v in info["subgoals"].items() if v and k not in seen]
            seen += newly
            if action.startswith("take ") and action != "take treasure":
                assert newly == ["key"]
            elif action == "open door":
                assert newly == ["door"]
            elif action == "take treasure":
                assert newly == ["chest"]
            else:
                assert newly == []
        assert seen == ["key", "door", "chest"] and info["success"]


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_distractors_complete_nothing(variant):
    touched = 0
    for seed in range(30):
        env = KeyroomEnv(variant, n_rooms=2 + seed % 3, n_distractors=4)
        env.reset(seed)
        distractors = {item.name for item in env.world.items[2:]}
        start = subgoals(env.state)
        rng = random.Random(seed)
        for _ in range(40):
            admissible = env.step("look").observation.admissible_actions
            moves = [a for a in admissible if a.startswith("go ")]
            toys = [a for a in admissible if a.partition(" ")[2] in distractors]
            action = rng.choice(toys + moves)
            touched += action in toys
            outcome = env.step(action)
            assert outcome.reward == 0.0 and not outcome.done and not outcome.info["invalid"]
            assert outcome.info["subgoals"] == start
    assert touched > 100


def test_step_before_reset_and_after_done_says_to_reset():
    env = KeyroomEnv("key")
    with pytest.raises(RuntimeError, match="reset"):
        env.step("look")
    env.reset(0)
    for action in solve(env, None):
        env.step(action)
    with pytest.raises(RuntimeError, match="reset"):
        env.step("look")
    env.reset(0)
    assert not env.step("look").done
    env.close()


def test_knobs_accept_strings_and_bad_values_fail_early():
    env = make_env("keyroom/compound", n_rooms="4", n_distractors="3")
    env.reset(1)
    assert len(env.world.rooms) == 4 and len(env.world.items) == 5
    with pytest.raises(ValueError, match="n_rooms"):
        KeyroomEnv("compound", n_rooms=1)
    with pytest.raises(ValueError, match="integer"):
        KeyroomEnv("compound", n_distractors="many")
    with pytest.raises(ValueError, match="choose one of"):
        KeyroomEnv("keyroom/dragon")


def test_env_pickles_mid_episode():
    env = KeyroomEnv("compound")
    env.reset(5)
    plan = solve(env, None)
    env.step(plan[0])
    clone = pickle.loads(pickle.dumps(env))
    for action in plan[1:]:
        outcome = clone.step(action)
    assert outcome.done and outcome.reward == 1.0


def test_game_id_names_the_world_not_the_seed():
    a, b = KeyroomEnv("compound"), KeyroomEnv("compound")
    a.reset(5)
    b.reset(5)
    assert a.game_id() == b.game_id()
    b.reset(6)
    assert a.game_id() != b.game_id()
    a.reset(7)
    seven = a.game_id()
    a.world = replace(a.world, seed=8)
    assert a.game_id() == seven
    door = KeyroomEnv("door")
    door.reset(7)
    assert door.game_id() != seven
    with pytest.raises(RuntimeError, match="reset"):
        KeyroomEnv("key").game_id()
