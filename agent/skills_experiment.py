"""The seed's section-5 experiment: sub-skill experience composed into a compound task, against a
from-scratch learner, every arm charged for every environment step it learned from.

Arms (all evaluated on the same dev seeds of the compound task, so arms pair seed by seed):

- `drrn`: a DRRN learns the compound task from reward alone (`crl.agent.baselines`); a point
  every `drrn_eval_every` learning steps.
- `none`: the model alone, scoring the listed actions, no memory (it learns nothing: one point at 0).
- `skills`: phase 1 plays each sub-task (`keyroom/key`, `door`, `chest`) on `phase1` train seeds with
  memory on; a synthesis pass relabels failures and stitches the compound task on the worlds
  played (each demonstration validated by replay); point 1. Phase 2 plays `budget` compound
  training episodes on new train worlds with memory and automatic synthesis; point 2.
  A task with no sub-tasks (no declared sub-goal order, e.g. `twx/twc`, whose sub-goals are the
  points of its score) has no sub-skills to play apart: phase 1 plays the task itself, `attempts`
  times on each of its `phase1` train worlds, one attempt of every world after another with memory
  on (memory's optimism for untried actions in known states makes a world's attempts differ), and
  the synthesis pass stitches, per world not yet solved, the points gained in different attempts
  into one demonstration, validated by replay (`memory.synthesis.stitch`, by points).
  With `retries` > 0, phase 1 then plays each (sub-)task's worlds that no attempt has solved yet
  again, with memory of the earlier attempts, up to `retries` more times (charged to the arm): a
  sub-skill that no episode of phase 1 reached leaves stitching nothing to compose (repeat 1 of the
  stop-45 keyroom run: no `door` segment, no stitch). Measured there (`docs/results/phase1-retries`),
  two retries gave more segments and stitches but no better first point.
- `skills+sft`: `skills`' memory, then an SFT round on its real and synthetic successes
  (synthetic ones weighted by `finetune.synthetic_weight`); the adapter plays with memory; point 3.
  With `sft_rounds` > 1 each further round first plays `collect` (default: `budget`) compound
  training episodes with the last adapter and memory (on train worlds of its own, charged to the
  arm), then trains a new adapter from the base model on the grown bank; a point per round.
  With `continue_rounds`, a later round instead continues the last adapter for `round_steps`
  optimizer steps on the compound task's wins alone (loop-erased demonstrations, or minimal ones
  with `finetune.sft_minimal`) — the recipe of the hand-run second rounds of stops 40 and 41.
  With `align` > 0, each new adapter then plays `align` compound training episodes with memory
  (stored, on train worlds of its own, charged to the arm) before its evaluation with memory, so
  memory's values hold the adapter's own experience and not only the base model's.
  The adapter is also evaluated alone (no memory read) on the same dev seeds, reported as the arm
  `sft alone`, so the report pairs adapter + memory against the adapter alone and against the base
  model with memory (`skills`' last point) — issue #14's complementarity.

The x-axis is every environment step an arm learned from: phase-1 steps, replay steps spent
validating synthetic episodes, and compound training steps (the DRRN: its learning steps).
Evaluation steps are charged to no arm (each arm's are listed). The final point of each arm is
also played on `test_episodes` test seeds, memory frozen (evaluations never write memory).

Results go to `results.json` after every point; an interrupted experiment resumes where it
stopped (an arm-repeat that stopped mid-stage is played again from a fresh data directory; a
`skills+sft` run that finished some SFT rounds resumes after its last, from a copy of its data
directory taken then). Run again with more arms or repeats and every other setting the same, a
folder's experiment is extended: its finished arm-repeats are kept, and its spec lists the union.
Processes playing different arms may share one folder (each saves under a file lock and keeps the
arm-repeats the others wrote); or play them into folders of their own and combine them with
`merge_results` (`crl experiment report --merge-into`); repeats too, each process starting at its
own `first_repeat` with the same `repeats` (the train worlds of a repeat depend on both).
The report (`table.md`, `curve.png`) is `crl.agent.skills_report`.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock

from crl.agent.config import Settings, load_settings
from crl.agent.llm.base import ChatModel

if TYPE_CHECKING:
    from crl.memory.synthesis.report import SynthesisResult

ARMS = ("drrn", "none", "skills", "skills+sft")


@dataclass
class SkillsSpec:
    """What the experiment measures (an interrupted run resumes only with the same spec)."""

    task: str = "keyroom/compound"
    arms: list[str] = field(default_factory=lambda: list(ARMS))
    phase1: int = 8
    budget: int = 8
    eval_episodes: int = 16
    test_episodes: int = 16
    repeats: int = 3
    drrn_steps: int = 12_000
    drrn_eval_every: int = 2_000
    sft_epochs: int = 3
    sft_max_steps: int = -1
    sft_rounds: int = 1
    overrides: dict[str, Any] = field(default_factory=dict)
    attempts: int = 4
    align: int = 0
    collect: int = 0
    continue_rounds: bool = False
    round_steps: int = 24
    retries: int = 0

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError("retries must be at least 0")
        if self.align < 0:
            raise ValueError("align must be at least 0")
        if self.collect < 0:
            raise ValueError("collect must be at least 0 (0: --budget)")
        if self.round_steps < 1:
            raise ValueError("round_steps must be at least 1")
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if self.sft_rounds < 1:
            raise ValueError("sft_rounds must be at least 1")
        if not self.arms:
            raise ValueError(f"no arms to play; arms: {', '.join(ARMS)}")
        unknown = [a for a in self.arms if a not in ARMS]
        if unknown:
            raise ValueError(f"unknown arm(s) {', '.join(unknown)}; arms: {', '.join(ARMS)}")
        if "skills+sft" in self.arms and "skills" not in self.arms:
            raise ValueError("the skills+sft arm continues the skills arm: add skills to --arms")

    @property
    def collect_episodes(self) -> int:
        """Compound episodes the last adapter plays with memory before each SFT round after the first."""
        return self.collect or self.budget


@dataclass
class SkillsPoint:
    """One evaluation of one arm after `env_steps` environment steps of learning.

    Attributes:
        stage: what had been done ("phase 1 + synthesis", "compound training", "sft", "drrn", "model alone").
        env_steps: every environment step learned from so far (phase 1, replay, compound training).
        successes, episodes: the evaluation's outcome.
        outcomes: per seed (as text), success.
        fold: "dev" or "test".
        detail: the parts of `env_steps`, what synthesis made, sub-goals reached, who chose actions.
    """

    stage: str
    env_steps: int
    successes: int
    episodes: int
    outcomes: dict[str, bool] = field(default_factory=dict)
    fold: str = "dev"
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0


@dataclass
class SkillsRun:
    """One repeat of one arm: its dev points, its final test point, and the seconds it took."""

    arm: str
    repeat: int
    points: list[SkillsPoint] = field(default_factory=list)
    test: SkillsPoint | None = None
    seconds: float = 0.0
    done: bool = False


def stages(spec: SkillsSpec, arm: str) -> int:
    """How many dev points an arm-repeat has when finished (the DRRN: one per evaluation)."""
    if arm == "drrn":
        return spec.drrn_steps // spec.drrn_eval_every + 1 + (spec.drrn_steps % spec.drrn_eval_every > 0)
    return {"none": 1, "skills": 2, "skills+sft": spec.sft_rounds}[arm]


def subtasks_of(task: str) -> list[str]:
    """The sub-tasks phase 1 plays, in the task's declared sub-goal order; [] for a task that
    declares none (phase 1 then plays the task itself, see the module's docstring)."""
    from crl.memory.synthesis.task_skills import declares_order, stitchable, subgoal_order, subtask_for

    if not declares_order(task):
        return []
    if not stitchable(task):
        raise ValueError(f"{task} declares no sub-goal order of its own: there are no sub-skills to learn first")
    subtasks = [subtask_for(task, s) for s in subgoal_order(task)]
    missing = [s for s, t in zip(subgoal_order(task), subtasks, strict=True) if t is None]
    if missing:
        raise ValueError(f"{task}'s sub-goals {', '.join(missing)} have no sub-task to play in phase 1")
    return [t for t in subtasks if t is not None]


def arm_settings(spec: SkillsSpec, arm: str, home: Path) -> Settings:
    """The agent's settings for an arm: the posterior policy; memory and automatic synthesis for skills arms
    (stitches held to the experiment's step limit, when it sets one)."""
    layers: dict[str, Any] = json.loads(json.dumps(spec.overrides))
    layers.setdefault("agent", {}).setdefault("policy", "posterior")
    layers.setdefault("reflect", {}).setdefault("enabled", False)
    if arm == "none":
        layers["agent"]["memory"] = "off"
        layers.setdefault("memory", {})["enabled"] = False
    else:
        layers.setdefault("synthesis", {}).setdefault("auto", True)
        if step_limit(spec):
            layers["synthesis"].setdefault("max_steps", step_limit(spec))
    layers["home"] = str(home)
    return load_settings(layers)


def eval_point(result, stage: str, env_steps: int, fold: str, detail: dict[str, Any]) -> SkillsPoint:
    """A point from an evaluation run: outcomes by seed, sub-goals reached, who chose the actions."""
    report = result.report()
    finished = [e for e in result.episodes if e.finished]
    reached = Counter(k for e in finished for k, v in (e.subgoals or {}).items() if v)
    return SkillsPoint(
        stage,
        env_steps,
        report["successes"],
        report["episodes"],
        {str(e.seed): bool(e.success) for e in finished},
        fold,
        detail
        | {
            "eval_env_steps": sum(len(e.steps) for e in result.episodes),
            "subgoals_reached": dict(reached),
            "decided_by": report["decided_by"],
            "run_id": result.info.run_id,
        },
    )


def steps_of(result) -> int:
    """Environment steps a run played."""
    return sum(len(e.steps) for e in result.episodes)


def replay_steps_of(result) -> int:
    """Environment steps a training run's automatic synthesis spent replaying."""
    return (result.info.synthesis or {}).get("replay_env_steps", 0)


def step_limit(spec: SkillsSpec) -> int | None:
    """The step limit every arm plays under when the experiment sets one (`--max-steps`)."""
    return spec.overrides.get("agent", {}).get("max_steps")


def runs_of(saved: dict[str, Any]) -> list[SkillsRun]:
    """The arm-repeats of a `results.json`."""
    return [
        SkillsRun(
            r["arm"],
            r["repeat"],
            [SkillsPoint(**p) for p in r["points"]],
            SkillsPoint(**r["test"]) if r.get("test") else None,
            r["seconds"],
            r.get("done", False),
        )
        for r in saved["runs"]
    ]


def spec_of(saved: dict[str, Any]) -> SkillsSpec:
    """The spec a `results.json` was written for (fields added since take their defaults)."""
    return SkillsSpec(**{k: v for k, v in saved.items() if k in SkillsSpec.__dataclass_fields__})


EXTENSIBLE = ("arms", "repeats")


def spec_differences(saved: SkillsSpec, spec: SkillsSpec) -> list[str]:
    """The fields, other than the arms and the number of repeats, in which `spec` differs from the
    `saved` one ("phase1 16, here 8"); empty when `spec` may resume or extend the saved experiment."""
    old, new = asdict(saved), asdict(spec)
    return [f"{k} {old[k]!r}, here {new[k]!r}" for k in old if k not in EXTENSIBLE and old[k] != new[k]]


def merged_spec(saved: SkillsSpec | None, spec: SkillsSpec) -> SkillsSpec:
    """What a folder holds after `spec` extended the `saved` experiment: every arm either played, in
    the canonical order, and the larger number of repeats."""
    if saved is None:
        return spec
    arms = [a for a in ARMS if a in saved.arms or a in spec.arms]
    return SkillsSpec(**(asdict(spec) | {"arms": arms, "repeats": max(saved.repeats, spec.repeats)}))


def is_skills_results(results: dict[str, Any]) -> bool:
    """Whether a `results.json` was written by this experiment (not by `crl experiment curve`)."""
    return "phase1" in results.get("spec", {})


def merge_results(parts: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """One experiment's results from the folders its arms or repeats were played in, e.g. in parallel.

    Args:
        parts: (where from, for messages; the loaded `results.json`), at least one.

    Returns:
        The results with every part's arm-repeats and the spec listing their union (`merged_spec`).

    Raises:
        ValueError: a part is not this experiment's, differs in a setting other than the arms and
            repeats (the dev seeds would not pair), or holds an arm-repeat another part holds too.
    """
    if not parts:
        raise ValueError("nothing to merge")
    merged: SkillsSpec | None = None
    runs: list[dict[str, Any]] = []
    seen: dict[tuple[str, int], str] = {}
    for where, results in parts:
        if not is_skills_results(results):
            raise ValueError(f"{where} is not a `crl experiment skills` result")
        spec = spec_of(results["spec"])
        if merged is not None and (differ := spec_differences(merged, spec)):
            raise ValueError(f"{where} is another experiment ({'; '.join(differ)}): its seeds would not pair")
        merged = merged_spec(merged, spec)
        for r in results["runs"]:
            key = (r["arm"], r["repeat"])
            if key in seen:
                raise ValueError(f"{r['arm']} repeat {r['repeat']} is in both {seen[key]} and {where}")
            seen[key] = where
            runs.append(r)
    return {"spec": asdict(merged), "runs": runs}


class SkillsExperiment:
    """Runs (or resumes, or extends with more arms or repeats) the experiment of `spec` in `out_dir`."""

    def __init__(
        self,
        spec: SkillsSpec,
        out_dir: Path,
        model: ChatModel | None = None,
        on_point: Callable[[SkillsRun, SkillsPoint], None] | None = None,
        first_repeat: int = 0,
    ) -> None:
        if not 0 <= first_repeat < spec.repeats:
            raise ValueError(
                f"the first repeat to play must be from 0 to {spec.repeats - 1} (--repeats {spec.repeats})"
            )
        self.spec = spec
        self.first_repeat = first_repeat
        self.out_dir = Path(out_dir)
        self.model = model
        self.on_point = on_point
        self.path = self.out_dir / "results.json"
        self.runs: list[SkillsRun] = []
        self.saved_spec: SkillsSpec | None = None
        self.playing: set[tuple[str, int]] = set()
        self.subtasks = subtasks_of(spec.task)

    # ---- bookkeeping ------------------------------------------------------------------------

    def load(self) -> None:
        """Read what an earlier, interrupted run of the same spec finished."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            return
        old = json.loads(self.path.read_text())
        saved = spec_of(old["spec"])
        differ = spec_differences(saved, self.spec)
        if differ:
            raise ValueError(f"{self.path} holds a different experiment ({'; '.join(differ)}); choose another --out")
        self.saved_spec = saved
        self.runs = runs_of(old)

    def kept_points(self) -> int:
        """The dev points an earlier run of this spec in `out_dir` saved that a resume keeps (those of
        finished arm-repeats, and of a `skills+sft` run's finished rounds): where a progress bar starts."""
        probe = SkillsExperiment(self.spec, self.out_dir)
        try:
            probe.load()
        except ValueError:
            return 0
        return sum(
            len(r.points)
            for r in probe.runs
            if r.arm in self.spec.arms and self.first_repeat <= r.repeat < self.spec.repeats and probe.resumable(r)
        )

    def resumable(self, run: SkillsRun) -> bool:
        """Whether a resume keeps this saved arm-repeat: finished, or with a snapshot of its last point."""
        return run.done or bool(run.points and self.snapshot(run.arm, run.repeat, len(run.points)).is_dir())

    def save(self) -> None:
        """Write `results.json` atomically, under a file lock. The arm-repeats this process plays are
        written as it holds them and every other one as the file holds it now, so processes playing
        different arms in the same folder keep each other's points."""
        with FileLock(str(self.path.with_suffix(".lock"))):
            saved, runs = self.saved_spec, self.runs
            if self.path.exists():
                current = json.loads(self.path.read_text())
                saved = spec_of(current["spec"])
                on_file = runs_of(current)
                listed = {(r.arm, r.repeat) for r in on_file}
                mine = {(r.arm, r.repeat): r for r in runs if (r.arm, r.repeat) in self.playing}
                runs = [mine.pop((r.arm, r.repeat), r) for r in on_file]
                runs += [r for r in self.runs if (r.arm, r.repeat) not in listed]
            self.runs = runs
            tmp = self.path.with_suffix(".tmp")
            data = {"spec": asdict(merged_spec(saved, self.spec)), "runs": [asdict(r) for r in runs]}
            tmp.write_text(json.dumps(data, indent=1))
            tmp.replace(self.path)

    def run_of(self, arm: str, repeat: int) -> SkillsRun:
        """The arm-repeat's record; one left unfinished is started over (its data directory wiped),
        except a `skills+sft` run with finished rounds, which resumes from the snapshot of its last."""
        self.playing.add((arm, repeat))
        for i, r in enumerate(self.runs):
            if (r.arm, r.repeat) == (arm, repeat):
                if self.resumable(r):
                    return r
                self.runs[i] = SkillsRun(arm, repeat)
                shutil.rmtree(self.home(arm, repeat), ignore_errors=True)
                return self.runs[i]
        run = SkillsRun(arm, repeat)
        self.runs.append(run)
        return run

    def home(self, arm: str, repeat: int) -> Path:
        return self.out_dir / arm.replace("+", "-") / f"repeat-{repeat}"

    def snapshot(self, arm: str, repeat: int, points: int) -> Path:
        """Where an arm-repeat's data directory is copied once its `points`-th point is saved."""
        return self.home(arm, repeat).with_name(f"repeat-{repeat}-after-{points}")

    def keep_snapshot(self, arm: str, repeat: int, points: int) -> None:
        """Copy the arm-repeat's data directory (bank, adapters) aside, replacing the earlier copy."""
        target = self.snapshot(arm, repeat, points)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(self.home(arm, repeat), target)
        shutil.rmtree(self.snapshot(arm, repeat, points - 1), ignore_errors=True)

    def add(self, run: SkillsRun, point: SkillsPoint, started: float) -> None:
        run.points.append(point)
        run.seconds += time.monotonic() - started
        self.save()
        if self.on_point is not None:
            self.on_point(run, point)

    def chat_model(self, settings: Settings) -> ChatModel:
        if self.model is None:
            from crl.agent.llm.factory import build_chat_model

            self.model = build_chat_model(settings)
        return self.model

    # ---- the experiment ------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Play every arm and repeat not finished yet (from `first_repeat` on), a whole repeat before the
        next (a run cut short still pairs every arm on its finished repeats); write the report; return
        the results."""
        self.load()
        for repeat in range(self.first_repeat, self.spec.repeats):
            for arm in self.spec.arms:
                if arm == "none" and repeat and self.deterministic_none():
                    continue
                run = self.run_of(arm, repeat)
                if run.done:
                    continue
                getattr(self, "_" + arm.replace("+", "_"))(run, repeat)
                run.done = True
                self.save()
            from crl.agent.skills_report import write_report

            write_report(json.loads(self.path.read_text()), self.out_dir)
        return json.loads(self.path.read_text())

    def deterministic_none(self) -> bool:
        """The model alone with greedy scoring repeats itself on the same dev seeds: one repeat stands for all."""
        posterior = self.spec.overrides.get("agent", {}).get("posterior", {})
        return posterior.get("mode", "argmax") != "sample"

    def _drrn(self, run: SkillsRun, repeat: int) -> None:
        from crl.agent.baselines.learner import DRRNLearner, evaluate
        from crl.tasks.registry import fold_seeds, make_env

        spec = self.spec
        learner = DRRNLearner(spec.task, spec.drrn_steps, repeat, spec.drrn_eval_every, spec.eval_episodes)
        learner.max_steps = step_limit(spec) or learner.max_steps
        started = time.monotonic()

        def point(p) -> None:
            nonlocal started
            detail = {"eval_env_steps": p.eval_env_steps, "train_episodes": p.train_episodes, "wall_s": p.wall_s}
            successes = sum(p.outcomes.values()) if p.outcomes else round(p.dev_success * p.dev_episodes)
            self.add(
                run, SkillsPoint("drrn", p.env_steps, successes, p.dev_episodes, p.outcomes, "dev", detail), started
            )
            started = time.monotonic()

        learner.run(on_point=point)
        if spec.test_episodes:
            env = make_env(spec.task)
            try:
                seeds = fold_seeds(spec.task, "test", spec.test_episodes)
                result = evaluate(learner.agent, env, seeds, learner.max_steps)
            finally:
                env.close()
            run.test = SkillsPoint(
                "drrn", learner.env_steps, result.successes, result.episodes, result.outcomes, "test"
            )

    def _none(self, run: SkillsRun, repeat: int) -> None:
        from crl.agent.app import start_run

        settings = arm_settings(self.spec, "none", self.home("none", repeat))
        settings.llm.seed = repeat
        started = time.monotonic()
        model = self.chat_model(settings)
        dev = start_run(settings, self.spec.task, self.spec.eval_episodes, fold="dev", kind="eval", model=model)
        self.add(run, eval_point(dev, "model alone", 0, "dev", {}), started)
        if self.spec.test_episodes:
            test = start_run(settings, self.spec.task, self.spec.test_episodes, fold="test", kind="eval", model=model)
            run.test = eval_point(test, "model alone", 0, "test", {})

    def _skills(self, run: SkillsRun, repeat: int) -> None:
        from crl.agent.app import start_run

        spec = self.spec
        settings = arm_settings(spec, "skills", self.home("skills", repeat))
        settings.llm.seed = repeat
        model = self.chat_model(settings)
        started = time.monotonic()
        phase1, replay, plays = self._phase1(settings, repeat, model)
        synthesis = self._synthesize(settings)
        replay += synthesis.report.replay_env_steps
        detail = {
            "phase1_steps": phase1,
            "replay_steps": replay,
            "train_steps": 0,
            "phase1_plays": plays,
            "synthesis": synthesis.report.to_dict(),
        }
        dev = start_run(settings, spec.task, spec.eval_episodes, fold="dev", kind="eval", model=model)
        self.add(run, eval_point(dev, "phase 1 + synthesis", phase1 + replay, "dev", detail), started)
        started = time.monotonic()
        compound_start = spec.repeats * spec.phase1 + repeat * spec.budget
        train = start_run(settings, spec.task, spec.budget, seed_start=compound_start, model=model)
        auto = train.info.synthesis or {}
        replay += replay_steps_of(train)
        train_steps = steps_of(train)
        detail = {
            "phase1_steps": phase1,
            "replay_steps": replay,
            "train_steps": train_steps,
            "train_successes": train.report()["successes"],
            "synthesis": synthesis.report.to_dict(),
            "auto_synthesis": auto,
        }
        total = phase1 + replay + train_steps
        dev = start_run(settings, spec.task, spec.eval_episodes, fold="dev", kind="eval", model=model)
        self.add(run, eval_point(dev, "compound training", total, "dev", detail), started)
        if spec.test_episodes:
            test = start_run(settings, spec.task, spec.test_episodes, fold="test", kind="eval", model=model)
            run.test = eval_point(test, "compound training", total, "test", detail)

    def _phase1(self, settings: Settings, repeat: int, model: ChatModel) -> tuple[int, int, list[dict[str, Any]]]:
        """Play phase 1 (see the module's docstring) with memory on.

        Returns:
            The environment steps played, those its automatic synthesis spent replaying, and one
            record per play: task, attempt (1-based), worlds played, worlds won.
        """
        from crl.agent.app import start_run
        from crl.tasks.registry import fold_seeds

        spec = self.spec
        steps = replay = 0
        plays: list[dict[str, Any]] = []
        for task, attempts in [(sub, 1) for sub in self.subtasks] or [(spec.task, spec.attempts)]:
            worlds = fold_seeds(task, "train", spec.phase1, repeat * spec.phase1)
            solved: set[int] = set()
            for attempt in range(attempts + spec.retries):
                seeds = worlds if attempt < attempts else [s for s in worlds if s not in solved]
                if not seeds:
                    break
                played = start_run(settings, task, len(seeds), seeds=seeds, model=model)
                steps += steps_of(played)
                replay += replay_steps_of(played)
                won = {e.seed for e in played.episodes if e.success}
                solved |= won
                plays.append({"task": task, "attempt": attempt + 1, "worlds": len(seeds), "won": len(won)})
        return steps, replay, plays

    def _synthesize(self, settings: Settings) -> SynthesisResult:
        """The synthesis pass after phase 1: relabel sub-task failures (where there are sub-tasks) and
        stitch the compound task on the worlds played, each stitch validated by replay."""
        from crl.agent.app import open_bank
        from crl.memory.synthesis.bank_pass import synthesize_bank
        from crl.memory.synthesis.task_skills import family_of

        bank = open_bank(settings, actor="skills-experiment")
        try:
            return synthesize_bank(
                bank,
                family_of(self.spec.task),
                relabel=bool(self.subtasks),
                stitch_task=self.spec.task,
                similarity=settings.synthesis.similarity,
                threshold=settings.synthesis.threshold,
                max_steps=settings.synthesis.max_steps,
            )
        finally:
            bank.close()

    def _skills_sft(self, run: SkillsRun, repeat: int) -> None:
        from crl.agent.finetuning import evaluate_adapter, finetune_context

        spec = self.spec
        source = next(r for r in self.runs if (r.arm, r.repeat) == ("skills", repeat))
        home = self.home("skills+sft", repeat)
        finished = len(run.points)
        shutil.rmtree(home, ignore_errors=True)
        shutil.copytree(
            self.snapshot("skills+sft", repeat, finished) if finished else self.home("skills", repeat), home
        )
        settings = arm_settings(spec, "skills+sft", home)
        settings.llm.seed = repeat
        started = time.monotonic()
        config = settings.finetune.model_copy(update={"epochs": spec.sft_epochs, "max_steps": spec.sft_max_steps})
        ctx = finetune_context(settings, config, evaluator=False, progress=False)
        last = source.points[-1]
        env_steps, adapter, rounds = last.env_steps, None, []
        detail: dict[str, Any] = {}
        if finished:
            detail = run.points[-1].detail
            env_steps, rounds = run.points[-1].env_steps, list(detail.get("sft_rounds", []))
            adapter = ctx.registry.adapter_dir(detail["adapter"])
        for round_no in range(finished + 1, spec.sft_rounds + 1):
            if adapter is not None:
                played = self._collect_with_adapter(settings, adapter, repeat, round_no)
                collected = {
                    "round": round_no,
                    "train_steps": steps_of(played),
                    "replay_steps": replay_steps_of(played),
                    "train_successes": played.report()["successes"],
                }
                rounds.append(collected)
                env_steps += collected["train_steps"] + collected["replay_steps"]
            parent = detail.get("adapter") if spec.continue_rounds and adapter is not None else None
            adapter, detail = self._sft_round(
                ctx, settings, dict(last.detail) | {"sft_rounds": list(rounds)}, parent=parent
            )
            alone = evaluate_adapter(settings, spec.task, spec.eval_episodes, adapter, memory=False)
            detail["adapter_alone"] = asdict(
                eval_point(alone, f"{sft_stage(round_no)}, adapter alone", env_steps, "dev", {})
            )
            if spec.align:
                aligned = self._align(settings, adapter, repeat, round_no)
                detail["aligned"] = {
                    "episodes": spec.align,
                    "train_steps": steps_of(aligned),
                    "replay_steps": replay_steps_of(aligned),
                    "train_successes": aligned.report()["successes"],
                }
                env_steps += detail["aligned"]["train_steps"] + detail["aligned"]["replay_steps"]
            dev = evaluate_adapter(settings, spec.task, spec.eval_episodes, adapter, memory=True)
            self.add(run, eval_point(dev, sft_stage(round_no), env_steps, "dev", detail), started)
            self.keep_snapshot("skills+sft", repeat, round_no)
            started = time.monotonic()
        if spec.test_episodes and adapter is not None:
            test = evaluate_adapter(settings, spec.task, spec.test_episodes, adapter, memory=True, fold="test")
            run.test = eval_point(test, sft_stage(spec.sft_rounds), env_steps, "test", detail)
        shutil.rmtree(self.snapshot("skills+sft", repeat, spec.sft_rounds), ignore_errors=True)

    def _sft_round(
        self, ctx, settings: Settings, detail: dict[str, Any], parent: str | None = None
    ) -> tuple[Path, dict[str, Any]]:
        """Build an SFT dataset from the bank and train an adapter on it; the adapter's folder and what
        the round made. From the base model on the sub-tasks and the compound task, or, given `parent`,
        continuing that adapter for `round_steps` steps on the compound task's demonstrations."""
        from dataclasses import replace

        from crl.finetune.dataset_card import CARD_FILE
        from crl.finetune.rounds import make_dataset, train_and_register

        tasks = [*self.subtasks, self.spec.task]
        if parent:
            config = ctx.config.model_copy(update={"max_steps": self.spec.round_steps})
            ctx, tasks = replace(ctx, config=config), [self.spec.task]
        folder = make_dataset(ctx, "sft", tasks=tasks)
        card = json.loads((folder / CARD_FILE).read_text())
        _, lineage = train_and_register(ctx, "sft", folder, from_adapter=parent)
        return ctx.registry.adapter_dir(lineage.id), detail | {
            "adapter": lineage.id,
            "parent_adapter": parent,
            "sft_examples": card.get("examples"),
            "sft_unneeded": card.get("dropped", {}).get("unneeded", 0),
            "sft_stats": card.get("stats", {}).get("synthetic"),
            "sft_wall_s": round(lineage.metrics.get("wall_seconds", 0.0), 1),
        }

    def _collect_with_adapter(self, settings: Settings, adapter: Path, repeat: int, round_no: int):
        """Play `collect_episodes` compound training episodes with the adapter and memory (memory written,
        automatic synthesis on), on train worlds no other stage of any repeat plays."""
        from crl.agent.finetuning import play_with_adapter

        spec = self.spec
        first = spec.repeats * (spec.phase1 + spec.budget)
        n = spec.collect_episodes
        seed_start = first + (repeat * (spec.sft_rounds - 1) + round_no - 2) * n
        return play_with_adapter(settings, spec.task, n, adapter, seed_start=seed_start)

    def _align(self, settings: Settings, adapter: Path, repeat: int, round_no: int):
        """Play `align` compound training episodes with the new adapter and memory (memory written), on
        train worlds after every other stage's."""
        from crl.agent.finetuning import play_with_adapter

        spec = self.spec
        first = (
            spec.repeats * (spec.phase1 + spec.budget) + spec.repeats * (spec.sft_rounds - 1) * spec.collect_episodes
        )
        seed_start = first + (repeat * spec.sft_rounds + round_no - 1) * spec.align
        return play_with_adapter(settings, spec.task, spec.align, adapter, seed_start=seed_start)


def sft_stage(round_no: int) -> str:
    """The stage name of the `skills+sft` arm's point after SFT round `round_no`."""
    return "sft" if round_no == 1 else f"sft round {round_no}"
