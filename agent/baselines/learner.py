"""Train a DRRN on a task from reward alone and record its learning curve (dev success vs env steps).

Step accounting: `CurvePoint.env_steps` counts every environment step the learner played to
learn (exploration included, cut-off episodes included); the greedy dev evaluations that draw the
curve are counted apart in `eval_env_steps`, and `all_env_steps` is their sum. The step budget
bounds `env_steps`. The reward is the environment's own, unshaped (keyroom: 1.0 on completing the
variant's goal, 0 otherwise; sub-goals give nothing). Episodes end on the task's `max_steps`.
"""

from __future__ import annotations

import os
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from crl.agent.baselines.drrn import DRRNAgent, DRRNConfig, as_random_state
from crl.agent.baselines.replay import ReplayBuffer, Transition
from crl.tasks.registry import fold_seeds, get_task, make_env

CHECKPOINT_FORMAT = 1
RECENT_EPISODES = 100


@dataclass
class CurvePoint:
    """One evaluation of the greedy policy on dev seeds, with what training had consumed by then.

    Attributes:
        env_steps: environment steps played for learning so far (the budget counts these).
        eval_env_steps: environment steps spent on dev evaluations so far, this one included.
        train_episodes: training episodes finished so far.
        train_success: success rate of the last 100 training episodes (exploring), None before any.
        dev_success: share of the dev episodes the greedy policy won.
        dev_episodes: dev episodes played (the first `n` dev seeds, the same at every point).
        dev_mean_steps: mean steps of those episodes (a lost one counts the step limit).
        epsilon: the exploration rate at this point.
        loss: mean TD loss of the updates since the previous point, None when there were none.
        wall_s: seconds of training and evaluation so far (summed over resumed runs).
        outcomes: per dev seed (as text: a JSON key), whether the greedy policy won it.
    """

    env_steps: int
    eval_env_steps: int
    train_episodes: int
    train_success: float | None
    dev_success: float
    dev_episodes: int
    dev_mean_steps: float
    epsilon: float
    loss: float | None
    wall_s: float
    outcomes: dict[str, bool] = field(default_factory=dict)

    @property
    def all_env_steps(self) -> int:
        """Every environment step consumed: learning plus evaluation."""
        return self.env_steps + self.eval_env_steps

    def to_dict(self) -> dict:
        """The fields plus `all_env_steps`, for JSON."""
        return asdict(self) | {"all_env_steps": self.all_env_steps}


@dataclass
class EvalResult:
    """Greedy play on a list of seeds: wins, episodes and steps used."""

    successes: int
    episodes: int
    steps: int
    outcomes: dict[str, bool] = field(default_factory=dict)

    @property
    def success_rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0


def evaluate(agent: DRRNAgent, env, seeds: list[int], max_steps: int) -> EvalResult:
    """Play each seed once with the greedy policy (no exploration, no learning, no new words)."""
    steps = 0
    outcomes: dict[str, bool] = {}
    for seed in seeds:
        obs = env.reset(seed)
        outcomes[str(seed)] = False
        for _ in range(max_steps):
            state, actions = agent.encode(obs, grow=False)
            out = env.step(obs.admissible_actions[agent.act(state, actions, explore=False)])
            steps += 1
            obs = out.observation
            if out.done:
                outcomes[str(seed)] = bool(out.info.get("success", out.reward > 0))
                break
    return EvalResult(sum(outcomes.values()), len(seeds), steps, outcomes)


def default_threads() -> int:
    """`CRL_THREADS` when set, else 1: the networks are small, and one thread leaves the cores to others."""
    value = os.environ.get("CRL_THREADS", "").strip()
    try:
        return max(1, int(value)) if value else 1
    except ValueError:
        raise ValueError(f"CRL_THREADS must be a whole number of threads, got {value!r}") from None


class DRRNLearner:
    """A training run: the agent, its replay buffer, counters and curve; checkpointable between episodes.

    Args:
        task: a registered task name, knobs allowed (`keyroom/compound?n_rooms=3`).
        budget: environment steps to learn from.
        seed: seeds torch, exploration and the order of training games.
        eval_every: env steps between dev evaluations (one also runs at step 0 and at the end).
        eval_episodes: dev seeds per evaluation (the first `n` of the dev fold).
        config: DRRN hyper-parameters.
    """

    def __init__(
        self,
        task: str,
        budget: int,
        seed: int = 0,
        eval_every: int = 1000,
        eval_episodes: int = 32,
        config: DRRNConfig | None = None,
    ):
        if budget < 1 or eval_every < 1 or eval_episodes < 1:
            raise ValueError("budget, eval_every and eval_episodes must each be at least 1")
        self.task, self.budget, self.seed = task, budget, seed
        self.eval_every, self.eval_episodes = eval_every, eval_episodes
        self.config = config or DRRNConfig()
        spec = get_task(task)
        self.max_steps = spec.max_steps
        self.train_seeds = spec.folds.train
        self.dev_seeds = fold_seeds(task, "dev", eval_episodes)
        torch.manual_seed(seed)
        self.agent = DRRNAgent(self.config, random.Random(f"drrn-explore-{seed}"))
        self.replay = ReplayBuffer(self.config.replay_capacity, self.config.priority_fraction)
        self.game_rng = random.Random(f"drrn-games-{seed}")
        self.env_steps = self.eval_env_steps = self.episodes = 0
        self.recent: deque[bool] = deque(maxlen=RECENT_EPISODES)
        self.losses: list[float] = []
        self.curve: list[CurvePoint] = []
        self.wall_s = 0.0

    def run(
        self,
        checkpoint: str | Path | None = None,
        progress: bool = False,
        on_point: Callable[[CurvePoint], None] | None = None,
        threads: int | None = None,
    ) -> list[CurvePoint]:
        """Train until `budget` env steps have been played; return the curve.

        Args:
            checkpoint: a file to save to after each evaluation (at the end of that episode).
            progress: draw a progress bar on stderr.
            on_point: called with each new curve point (e.g. to print it as it comes).
            threads: torch threads during the run (restored after); None means `default_threads()`.
        """
        previous_threads = torch.get_num_threads()
        torch.set_num_threads(threads or default_threads())
        env, eval_env = make_env(self.task), make_env(self.task)
        bar = _Bar(self.budget, self.env_steps) if progress else None
        started = time.monotonic()
        try:
            if not self.curve:
                self._evaluate(eval_env, started, on_point)
            while self.env_steps < self.budget:
                save_due = self._episode(env, eval_env, started, on_point, bar)
                if checkpoint and save_due:
                    self.wall_s += time.monotonic() - started
                    started = time.monotonic()
                    self.save(checkpoint)
            if self.curve[-1].env_steps != self.env_steps:
                self._evaluate(eval_env, started, on_point)
        finally:
            torch.set_num_threads(previous_threads)
            env.close()
            eval_env.close()
            if bar:
                bar.close()
        self.wall_s += time.monotonic() - started
        if checkpoint:
            self.save(checkpoint)
        return self.curve

    def _episode(self, env, eval_env, started: float, on_point, bar) -> bool:
        """Play one training episode, learning as it goes; True when an evaluation happened in it."""
        cfg, agent = self.config, self.agent
        obs = env.reset(self.train_seeds[self.game_rng.randrange(len(self.train_seeds))])
        state, actions = agent.encode(obs)
        transitions: list[Transition] = []
        evaluated = won = False
        for _ in range(self.max_steps):
            if self.env_steps >= self.budget:
                break
            choice = agent.act(state, actions, cfg.epsilon(self.env_steps, self.budget))
            out = env.step(obs.admissible_actions[choice])
            self.env_steps += 1
            obs = out.observation
            if out.done:
                next_state, next_actions = agent.encode_state(obs), ()
                won = bool(out.info.get("success", out.reward > 0))
            else:
                next_state, next_actions = agent.encode(obs)
            transitions.append(
                Transition(state, actions[choice], float(out.reward), next_state, next_actions, out.done)
            )
            if self.env_steps >= cfg.learning_starts and self.env_steps % cfg.update_every == 0 and len(self.replay):
                self.losses.append(agent.update(self.replay.sample(cfg.batch_size, agent.rng)))
            if self.env_steps % cfg.target_update == 0:
                agent.sync_target()
            if bar:
                bar.advance(self.curve[-1].dev_success if self.curve else None)
            if self.env_steps % self.eval_every == 0:
                self._evaluate(eval_env, started, on_point)
                evaluated = True
            if out.done:
                break
            state, actions = next_state, next_actions
        self.replay.push_episode(transitions)
        self.episodes += 1
        self.recent.append(won)
        return evaluated

    def _evaluate(self, eval_env, started: float, on_point) -> None:
        result = evaluate(self.agent, eval_env, self.dev_seeds, self.max_steps)
        self.eval_env_steps += result.steps
        point = CurvePoint(
            env_steps=self.env_steps,
            eval_env_steps=self.eval_env_steps,
            train_episodes=self.episodes,
            train_success=sum(self.recent) / len(self.recent) if self.recent else None,
            dev_success=result.success_rate,
            dev_episodes=result.episodes,
            dev_mean_steps=result.steps / result.episodes,
            epsilon=self.config.epsilon(self.env_steps, self.budget),
            loss=sum(self.losses) / len(self.losses) if self.losses else None,
            wall_s=round(self.wall_s + time.monotonic() - started, 3),
            outcomes=result.outcomes,
        )
        self.losses.clear()
        self.curve.append(point)
        if on_point:
            on_point(point)

    def save(self, path: str | Path) -> None:
        """Write everything needed to resume (atomically: a crash mid-write keeps the old file)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {
            "format": CHECKPOINT_FORMAT,
            "run": {
                "task": self.task,
                "budget": self.budget,
                "seed": self.seed,
                "eval_every": self.eval_every,
                "eval_episodes": self.eval_episodes,
            },
            "agent": self.agent.state_dict(),
            "replay": self.replay.state_dict(),
            "counters": {
                "env_steps": self.env_steps,
                "eval_env_steps": self.eval_env_steps,
                "episodes": self.episodes,
                "recent": list(self.recent),
                "wall_s": self.wall_s,
            },
            "curve": [asdict(p) for p in self.curve],
            "game_rng": self.game_rng.getstate(),
            "torch_rng": torch.get_rng_state(),
        }
        tmp = path.with_name(path.name + ".tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path, budget: int | None = None) -> "DRRNLearner":
        """Resume a run saved by `save`; `budget` may extend (not shrink below what was played) its budget."""
        state = torch.load(Path(path), weights_only=True)
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"{path} is not a DRRN checkpoint of format {CHECKPOINT_FORMAT}; start a new run")
        run = state["run"]
        agent = DRRNAgent.from_state_dict(state["agent"])
        learner = cls(
            run["task"], budget or run["budget"], run["seed"], run["eval_every"], run["eval_episodes"], agent.config
        )
        learner.agent = agent
        learner.replay.load_state_dict(state["replay"])
        counters = state["counters"]
        learner.env_steps, learner.eval_env_steps = counters["env_steps"], counters["eval_env_steps"]
        learner.episodes, learner.wall_s = counters["episodes"], counters["wall_s"]
        learner.recent.extend(bool(x) for x in counters["recent"])
        learner.curve = [CurvePoint(**p) for p in state["curve"]]
        learner.game_rng.setstate(as_random_state(state["game_rng"]))
        torch.set_rng_state(state["torch_rng"])
        return learner


def train(
    task: str,
    env_steps_budget: int,
    seed: int = 0,
    eval_every: int = 1000,
    eval_episodes: int = 32,
    config: DRRNConfig | None = None,
    checkpoint: str | Path | None = None,
    progress: bool = False,
    on_point: Callable[[CurvePoint], None] | None = None,
) -> list[CurvePoint]:
    """Train a DRRN on `task` for `env_steps_budget` env steps; return dev success against steps.

    With `checkpoint`, the run saves there after each evaluation and, when the file already
    exists, resumes from it instead of starting over (same task required; `config` is then the
    saved one).

    Example:
        >>> curve = train("keyroom/key", 2000, eval_every=500, eval_episodes=16)  # doctest: +SKIP
        >>> [(p.env_steps, p.dev_success) for p in curve]  # doctest: +SKIP
    """
    if checkpoint and Path(checkpoint).exists():
        learner = DRRNLearner.load(checkpoint, budget=env_steps_budget)
        if learner.task != task:
            raise ValueError(f"{checkpoint} holds a run of {learner.task!r}, not {task!r}; pass another path")
    else:
        learner = DRRNLearner(task, env_steps_budget, seed, eval_every, eval_episodes, config)
    return learner.run(checkpoint=checkpoint, progress=progress, on_point=on_point)


class _Bar:
    """A rich progress bar over env steps showing the latest dev success."""

    def __init__(self, total: int, done: int):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("[bold]DRRN env steps"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("dev success {task.fields[dev]}"),
            TimeElapsedColumn(),
            console=Console(stderr=True),
        )
        self._task = self._progress.add_task("train", total=total, completed=done, dev="-")
        self._progress.start()

    def advance(self, dev_success: float | None) -> None:
        self._progress.update(self._task, advance=1, dev="-" if dev_success is None else f"{dev_success:.0%}")

    def close(self) -> None:
        self._progress.stop()
