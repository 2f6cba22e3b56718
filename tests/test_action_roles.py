"""Action roles: stored moves vote by what they did (through the open door), not by compass word."""

from __future__ import annotations

from crl.agent.advisor import MemoryAdvisor
from crl.memory.retrieval.action_roles import ActionRoles, roles_for
from crl.memory.retrieval.config import RetrievalConfig
from crl.memory.retrieval.episodic_control import ActionIndex, action_values, memory_advantages
from crl.memory.retrieval.retriever import ContextPack
from crl.tasks.keyroom import KeyroomEnv, solve
from crl.tasks.keyroom_world import LEAVE_CHEST_ROLE, OPEN_DOOR_ROLE, action_role
from tests.retrieval_fixtures import step_record


def _door_open(seed: int):
    """The observation right after the door opened in keyroom/compound `seed`, and the move through it."""
    env = KeyroomEnv("compound")
    obs = env.reset(seed)
    for action in solve(env):
        obs = env.step(action).observation
        if action == "open door":
            return obs, f"go {env.world.door_dir}"
    raise AssertionError("the plan never opens the door")


def _two_worlds():
    """Two seeds whose doors lie in different directions, each with its door-open observation."""
    first, first_move = _door_open(0)
    for seed in range(1, 50):
        other, other_move = _door_open(seed)
        if other_move != first_move and first_move in other.admissible_actions:
            return (first, first_move), (other, other_move)
    raise AssertionError("no pair of worlds with different door directions")


def test_keyroom_role_names_the_move_through_the_open_door_only():
    obs, move = _door_open(0)
    roles = {a: action_role(obs.text, a) for a in obs.admissible_actions}
    assert roles[move] == OPEN_DOOR_ROLE
    assert [a for a, r in roles.items() if r == OPEN_DOOR_ROLE] == [move]
    moves = [a for a in obs.admissible_actions if a.startswith("go ") and a != move]
    assert all(roles[a] is None for a in moves)
    assert {r for a, r in roles.items() if a.endswith(" key")} <= {"drop the key", "examine the key"}
    assert all(roles[a] is None for a in obs.admissible_actions if a.split()[0] in ("take", "drop") and "key" not in a)
    env = KeyroomEnv("compound")
    start = env.reset(0)
    assert all(action_role(start.text, a) is None for a in start.admissible_actions)  # door still locked


def test_a_stored_move_through_the_door_votes_for_the_door_here_not_for_its_compass_word():
    (stored_obs, stored_move), (here, here_move) = _two_worlds()
    stored = [
        (step_record(f"e{i}", 0, stored_move, "success", length=3, observation=stored_obs.text), 0.95) for i in range(3)
    ]
    roles = roles_for("keyroom/compound", here.text)
    values = action_values(stored, here.admissible_actions, RetrievalConfig(), roles=roles)
    assert set(values) == {here_move}
    assert values[here_move].successes == 3
    assert values[here_move].hint.startswith(f"{here_move} ({OPEN_DOOR_ROLE})")
    by_text = action_values(stored, here.admissible_actions, RetrievalConfig(ec_action_roles=False), roles=roles)
    assert set(by_text) == {stored_move}  # the old behaviour: a plain exit here gets the door's votes


def test_going_back_out_of_the_chest_room_is_not_the_move_toward_it():
    """A stored success through the open door toward the chest does not vote for leaving the chest's
    room through that door (what pulled the aligned adapter out of the chest room in 4 lost games)."""
    env = KeyroomEnv("compound")
    near = env.reset(0)
    for action in solve(env):
        if action == f"go {env.world.door_dir}":
            break
        near = env.step(action).observation
    far = env.step(f"go {env.world.door_dir}").observation
    back = next(a for a in far.admissible_actions if action_role(far.text, a) is not None and a.startswith("go "))
    assert action_role(near.text, f"go {env.world.door_dir}") == OPEN_DOOR_ROLE
    assert action_role(far.text, back) == LEAVE_CHEST_ROLE
    stored = [
        (step_record(f"e{i}", 0, f"go {env.world.door_dir}", "success", length=3, observation=near.text), 0.95)
        for i in range(3)
    ]
    values = action_values(
        stored, far.admissible_actions, RetrievalConfig(), roles=roles_for("keyroom/compound", far.text)
    )
    assert back not in values


def test_a_plain_exit_stored_does_not_vote_for_the_door_spelled_the_same():
    (stored_obs, stored_move), (here, here_move) = _two_worlds()
    plain = next(a for a in stored_obs.admissible_actions if a.startswith("go ") and a != stored_move)
    near = [(step_record("e0", 0, plain, "failure", length=2, observation=stored_obs.text), 0.9)]
    roles = ActionRoles(action_role, here.text)
    index = ActionIndex(here.admissible_actions, 0.5, roles)
    voted = [a for a, _ in index.matches(near[0][0])]
    assert here_move not in voted
    advantages = memory_advantages(near, here.admissible_actions, RetrievalConfig(), roles=roles)
    assert here_move not in advantages


def test_the_key_is_the_key_in_every_world_and_distractors_keep_the_partial_match():
    stored = [
        (step_record("e0", 0, "take iron key", "success", length=3), 0.9),
        (step_record("e1", 0, "take blue lamp", "success", length=3), 0.9),
    ]
    here = ["take brass key", "take red lamp"]
    roles = ActionRoles(action_role, "You are in the hall.\nExits: north to the attic.")
    with_roles = action_values(stored, here, RetrievalConfig(), roles=roles)
    without = action_values(stored, here, RetrievalConfig(), roles=None)
    assert with_roles["take brass key"].support == 2 * with_roles["take red lamp"].support  # the key's match is whole
    assert without["take brass key"].support == without["take red lamp"].support  # both only verb and last word
    assert with_roles["take brass key"].role == "take the key" and with_roles["take red lamp"].role is None
    assert action_role("", "unlock door with iron key") == "unlock door with the key"
    assert action_role("", "examine door") is None


def test_tasks_without_roles_match_by_text_as_before():
    assert roles_for("twx/coin", "You are in the kitchen.") is None
    assert roles_for("no-such/task", "anything") is None
    near = [(step_record("e0", 0, "take iron key", "success", length=2), 0.9)]
    values = action_values(near, ["take brass key", "look"], RetrievalConfig(), roles=None)
    assert values["take brass key"].support > 0  # the partial (verb + last word) match still works


def test_evidence_ids_credit_the_stored_steps_whose_role_matched():
    (stored_obs, stored_move), (here, here_move) = _two_worlds()
    near = [(step_record("e0", 0, stored_move, "success", length=2, observation=stored_obs.text), 0.9)]
    pack = ContextPack("q", neighbours=near, roles=roles_for("keyroom/compound", here.text))
    advisor = MemoryAdvisor.__new__(MemoryAdvisor)
    advisor.retriever = type("R", (), {"config": RetrievalConfig()})()
    assert advisor.evidence_ids(pack, here_move) == [near[0][0].id]
    assert advisor.evidence_ids(pack, stored_move) == []


def test_a_user_task_declares_roles_with_a_staticmethod():
    from crl.tasks.user_task import UserTask

    class Doors(UserTask):
        name = "doors/one"

        @staticmethod
        def action_role(observation, action):
            return "leave" if action == "go " + observation.split()[-1] else None

    spec = Doors.spec()
    assert spec.action_role("exit west", "go west") == "leave"
    assert spec.action_role("exit west", "go east") is None
    assert UserTask.action_role is None
