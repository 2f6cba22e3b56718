"""The DRRN baseline: its network, vocabulary, replay buffer, learner, checkpoints and bench entry."""

from __future__ import annotations

import json
import random

import pytest
import torch

from crl.agent.baselines.drrn import DRRNAgent, DRRNConfig
from crl.agent.baselines.learner import DRRNLearner, evaluate, train
from crl.agent.baselines.network import DRRNetwork
from crl.agent.baselines.replay import ReplayBuffer, Transition
from crl.agent.baselines.vocab import UNK, Vocab, segments
from crl.tasks import registry
from crl.tasks.base import Observation, SeedFolds, StepOutcome, TaskSpec

CORRIDOR = "drrntest/corridor"


class CorridorEnv:
    """Three rooms in a row; the coin lies at the west or east end (by seed); the player starts in the middle.

    Winning takes two steps (walk towards the jingle, take the coin) and pays 1.0; a policy that
    ignores the text wins at most half the games.
    """

    name = CORRIDOR

    def reset(self, seed: int) -> Observation:
        self.coin = "west" if seed % 2 else "east"
        self.room = "middle"
        return self._observe("")

    def step(self, action: str) -> StepOutcome:
        feedback = "Time passes."
        if action == "take coin" and self.room == self.coin:
            obs = self._observe("You take the coin.")
            return StepOutcome(obs, 1.0, True, {"success": True})
        if action.startswith("go "):
            direction = action[3:]
            self.room = direction if self.room == "middle" else "middle"
            feedback = f"You walk {direction}."
        return StepOutcome(self._observe(feedback), 0.0, False, {"success": False})

    def close(self) -> None:
        pass

    def _observe(self, feedback: str) -> Observation:
        lines = [feedback] if feedback else []
        lines.append(f"You are in the {self.room} room.")
        if self.room == "middle":
            lines.append(f"You hear a coin jingle to the {self.coin}.")
            actions = ["go east", "go west", "look", "wait"]
        else:
            back = "east" if self.room == "west" else "west"
            actions = [f"go {back}", "look", "wait"]
            if self.room == self.coin:
                lines.append("A coin glints on the floor.")
                actions.append("take coin")
        return Observation("\n".join(lines), "Find the coin and take it.", actions)


@pytest.fixture
def corridor(monkeypatch):
    registry.list_tasks()
    spec = TaskSpec(
        CORRIDOR,
        CorridorEnv,
        "test game",
        folds=SeedFolds(train=range(0, 1000), dev=range(1000, 1100), test=range(2000, 2100)),
        max_steps=6,
    )
    monkeypatch.setitem(registry._TASKS, CORRIDOR, spec)
    return CORRIDOR


SMALL = dict(embed_dim=16, hidden_dim=32, batch_size=32, learning_starts=50, target_update=100, lr=3e-3, update_every=1)


def test_words_and_segments():
    assert segments("Done.\n\nYou are in the hall. Exits: north.") == ["Done.", "You are in the hall.", "Exits: north."]
    vocab = Vocab(capacity=5)
    assert vocab.encode("take key") == (2, 3)
    assert vocab.encode("Take KEY.") == (2, 3, 4)
    assert vocab.encode("open door") == (UNK, UNK)  # full: later words are unknown
    assert vocab.encode("") == (UNK,)
    assert vocab.encode("take lamp", grow=False) == (2, UNK)
    assert Vocab(5, vocab.words()).stoi == vocab.stoi


@pytest.mark.parametrize("interaction", ["mlp", "dot"])
@pytest.mark.parametrize("encoder", ["gru", "bag"])
def test_network_scores_a_different_number_of_actions_per_state(encoder, interaction):
    torch.manual_seed(0)
    net = DRRNetwork(vocab_size=20, embed_dim=8, hidden_dim=12, encoder=encoder, interaction=interaction)
    states = [((2, 3),), ((4,), (5, 6, 7)), ((2, 3), (8,), (9, 10))]
    actions = [[(11,), (12, 13)], [], [(11,), (14,), (15, 16, 17), (12, 13), (18,)]]
    q = net(states, actions)
    assert [tuple(v.shape) for v in q] == [(2,), (0,), (5,)]
    for state, acts, batched in zip(states, actions, q):
        if acts:
            assert torch.allclose(net.score(state, acts), batched.detach(), atol=1e-5)
    assert not torch.allclose(q[0][0], q[2][0])  # the same action scores differently in another state
    q[2].sum().backward()
    assert net.embedding.weight.grad is not None


def test_network_rejects_mismatched_batches():
    net = DRRNetwork(vocab_size=10, embed_dim=4, hidden_dim=4)
    with pytest.raises(ValueError, match="one list per state"):
        net([((2,),)], [])


def _transition(tag: int, reward: float = 0.0, done: bool = False) -> Transition:
    return Transition(((tag,), (tag, 1)), (tag,), reward, ((tag + 1,),), () if done else ((3,), (4,)), done)


def test_replay_overwrites_oldest_and_reserves_a_share_for_rewarded_episodes():
    buffer = ReplayBuffer(capacity=10, priority_fraction=0.5)
    assert buffer.sample(4, random.Random(0)) == []
    for i in range(8):
        buffer.push_episode([_transition(100 + i)])
    assert len(buffer) == 5  # the ordinary half keeps only its 5 newest
    assert {t.action[0] for t in buffer.ordinary.items} == {103, 104, 105, 106, 107}
    winner = [_transition(7), _transition(8, reward=1.0, done=True)]
    buffer.push_episode(winner)
    assert buffer.priority.items == winner
    batch = buffer.sample(40, random.Random(0))
    assert len(batch) == 40
    assert sum(t in winner for t in batch) == 20

    copy = ReplayBuffer(capacity=10, priority_fraction=0.5)
    copy.load_state_dict(buffer.state_dict())
    assert copy.priority.items == buffer.priority.items
    assert copy.ordinary.items == buffer.ordinary.items
    assert copy.ordinary.next == buffer.ordinary.next


def test_uniform_replay_has_no_priority_share():
    buffer = ReplayBuffer(capacity=4, priority_fraction=0.0)
    buffer.push_episode([_transition(1, reward=1.0, done=True)])
    assert buffer.ordinary.items and not buffer.priority.items
    assert buffer.sample(3, random.Random(0)) == [_transition(1, reward=1.0, done=True)] * 3


def test_agent_needs_admissible_actions():
    agent = DRRNAgent(DRRNConfig(**SMALL))
    with pytest.raises(ValueError, match="admissible"):
        agent.encode(Observation("You are somewhere.", "Win.", None))


def test_exploration_epsilon_and_softmax_vs_greedy():
    torch.manual_seed(0)
    state, actions = ((2, 3),), [(4,), (5,), (6,), (7,)]
    greedy = DRRNAgent(DRRNConfig(**SMALL), random.Random(0))
    best = int(torch.argmax(greedy.q_values(state, actions)))
    assert {greedy.act(state, actions, epsilon=1.0, explore=False) for _ in range(20)} == {best}
    assert {greedy.act(state, actions, epsilon=0.0) for _ in range(20)} == {best}
    assert len({greedy.act(state, actions, epsilon=1.0) for _ in range(40)}) == 4
    hot = DRRNAgent(DRRNConfig(**SMALL, exploration="softmax", temperature=100.0), random.Random(0))
    assert len({hot.act(state, actions) for _ in range(40)}) == 4
    with pytest.raises(ValueError, match="exploration"):
        DRRNConfig(exploration="boltzmann")


def test_td_update_moves_q_towards_the_reward():
    torch.manual_seed(0)
    agent = DRRNAgent(DRRNConfig(**SMALL))
    win = Transition(((2, 3),), (4,), 1.0, ((5,),), (), True)
    before = float(agent.q_values(win.state, [win.action])[0])
    for _ in range(200):
        agent.update([win])
    after = float(agent.q_values(win.state, [win.action])[0])
    assert abs(after - 1.0) < 0.1 < abs(before - 1.0)


def test_learner_beats_its_untrained_greedy_policy(corridor):
    config = DRRNConfig(**SMALL, epsilon_decay_fraction=0.6)
    learner = DRRNLearner(corridor, budget=600, seed=0, eval_every=300, eval_episodes=20, config=config)
    env = CorridorEnv()
    untrained = evaluate(learner.agent, env, learner.dev_seeds, learner.max_steps)
    curve = learner.run()
    trained = evaluate(learner.agent, env, learner.dev_seeds, learner.max_steps)

    assert untrained.success_rate <= 0.5
    assert trained.success_rate == 1.0
    assert trained.steps == 2 * trained.episodes
    assert curve[0].env_steps == 0 and curve[0].dev_success == untrained.success_rate
    assert [p.env_steps for p in curve] == [0, 300, 600]
    assert curve[-1].dev_success == 1.0
    assert curve[-1].eval_env_steps == sum(round(p.dev_mean_steps * p.dev_episodes) for p in curve)
    assert curve[-1].all_env_steps == 600 + curve[-1].eval_env_steps
    stored = learner.replay.priority.items + learner.replay.ordinary.items
    assert all(t.reward > 0 for t in stored if t.done)  # the step limit never marks a transition terminal
    assert any(not t.done and not t.reward for t in stored)


def test_checkpoint_round_trip_and_resume(corridor, tmp_path):
    path = tmp_path / "drrn.pt"
    config = DRRNConfig(**SMALL)
    first = train(corridor, 150, seed=3, eval_every=100, eval_episodes=4, config=config, checkpoint=path)
    assert [p.env_steps for p in first] == [0, 100, 150]

    learner = DRRNLearner.load(path)
    assert learner.env_steps == 150 and learner.curve == first
    assert learner.agent.updates > 0 and len(learner.replay) > 0
    obs = CorridorEnv().reset(1001)
    saved_agent = torch.load(path, weights_only=True)["agent"]
    assert learner.agent.vocab.words() == saved_agent["vocab"]
    state, actions = learner.agent.encode(obs, grow=False)
    again = DRRNAgent.from_state_dict(learner.agent.state_dict())
    assert torch.equal(again.q_values(state, actions), learner.agent.q_values(state, actions))

    resumed = train(corridor, 250, eval_every=100, config=config, checkpoint=path)
    assert resumed[:3] == first
    assert [p.env_steps for p in resumed] == [0, 100, 150, 200, 250]
    assert DRRNLearner.load(path).env_steps == 250

    with pytest.raises(ValueError, match="holds a run of"):
        train("keyroom/key", 300, checkpoint=path)


def test_bench_prints_a_curve_of_json_lines(capsys):
    from bench.drrn_baseline import main

    main(
        ["--task", "keyroom/key", "--steps", "60", "--eval-every", "30", "--eval-episodes", "2", "--set", "encoder=bag"]
    )
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["env_steps"] for row in lines[:-1]] == [0, 30, 60]
    assert all(0.0 <= row["dev_success"] <= 1.0 for row in lines[:-1])
    assert lines[-1]["final"] and lines[-1]["config"]["encoder"] == "bag"
    assert lines[-1]["all_env_steps"] == 60 + lines[-2]["eval_env_steps"]
