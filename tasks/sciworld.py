"""The `sciworld/<task>` tasks: the 30 ScienceWorld tasks behind the `TextEnv` interface.

Seeds are ScienceWorld variation indices. The engine splits each task's variations into
contiguous train, dev and test blocks, and the task's folds are exactly those blocks (boil: train
0-13, dev 14-20, test 21-29), so `reset(seed)` plays variation `seed`. Simplifications are a
knob: `sciworld/boil?simplifications=easy` (or a comma list such as `openDoors,openContainers`).

ScienceWorld accepts hundreds to thousands of actions per step, too many for a prompt, so
`Observation.admissible_actions` is None and the observation text ends with the engine's action
templates and the objects in view. `step` sends the reply to the engine as written (normalised);
when the engine knows no such action, the reply is matched onto the engine's list of valid
actions (articles ignored, then a close spelling match; never for `focus on`, which is
irreversible); when the engine asks which of several objects was meant, the first is taken.
`info["invalid"]` is True when nothing matched ("No known action matches that input.").
`reset task` is refused: it would undo the episode's progress and failures inside the engine.

`info["score"]` is the engine's score (0-100; negative once the task has failed), the reward
is its change divided by 100, success is a score of 100 with the task completed, and a negative
score ends the episode as a failure. `info["subgoals"]` holds the engine's named sequential
sub-goals (each one a score increment), e.g. `{"focus on substance": True, ...}`.

`max_steps` is the longest gold path over five train variations spread across the train block
(gold paths include waiting and re-measuring steps, so they are not shortest).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import partial
from typing import Any

from crl.tasks.base import Observation, SeedFolds, StepOutcome, TaskSpec
from crl.tasks.java_engine import (
    EngineError,
    JavaEngine,
    import_suite,
    invalid_feedback,
    normalise_action,
    without_articles,
)

FAMILY = "sciworld"
STEP_LIMIT = 1_000_000  # the engine wrapper's own limit; the runner enforces the real one
NO_MATCH = "No known action matches that input."
AMBIGUOUS = "Ambiguous request"
REFUSED = frozenset({"reset task"})
HINT_LIMIT = 700  # characters of object names shown per observation
FUZZY_CUTOFF = 0.85


@dataclass(frozen=True)
class Task:
    """One ScienceWorld task: name, topic and title, variation split sizes and step limit."""

    name: str
    topic: str
    title: str
    n_train: int
    n_dev: int
    n_test: int
    max_steps: int

    @property
    def folds(self) -> SeedFolds:
        dev = self.n_train + self.n_dev
        return SeedFolds(
            train=range(0, self.n_train),
            dev=range(self.n_train, dev),
            test=range(dev, dev + self.n_test),
        )

    @property
    def n_variations(self) -> int:
        return self.n_train + self.n_dev + self.n_test


# Variation splits as scienceworld 1.2.3 reports them (tests check this table against the engine).
TASKS = {
    t.name: t
    for t in (
        Task("boil", "Matter", "Changes of state (boiling)", 14, 7, 9, 81),
        Task("melt", "Matter", "Changes of state (melting)", 14, 7, 9, 53),
        Task("freeze", "Matter", "Changes of state (freezing)", 14, 7, 9, 49),
        Task("change-the-state-of-matter-of", "Matter", "Changes of state (any)", 14, 7, 9, 39),
        Task("use-thermometer", "Measurement", "Use a thermometer", 270, 135, 135, 24),
        Task(
            "measure-melting-point-known-substance",
            "Measurement",
            "Measure a melting point (known substance)",
            218,
            109,
            109,
            31,
        ),
        Task(
            "measure-melting-point-unknown-substance",
            "Measurement",
            "Measure a melting point (unknown substance)",
            150,
            75,
            75,
            94,
        ),
        Task("power-component", "Electricity", "Create a circuit", 10, 5, 5, 13),
        Task(
            "power-component-renewable-vs-nonrenewable-energy",
            "Electricity",
            "Renewable vs non-renewable energy",
            10,
            5,
            5,
            28,
        ),
        Task("test-conductivity", "Electricity", "Test conductivity (known)", 450, 225, 225, 43),
        Task(
            "test-conductivity-of-unknown-substances", "Electricity", "Test conductivity (unknown)", 300, 150, 150, 23
        ),
        Task("find-living-thing", "Classification", "Find a living thing", 150, 75, 75, 16),
        Task("find-non-living-thing", "Classification", "Find a non-living thing", 150, 75, 75, 11),
        Task("find-plant", "Classification", "Find a plant", 150, 75, 75, 12),
        Task("find-animal", "Classification", "Find an animal", 150, 75, 75, 16),
        Task("grow-plant", "Biology", "Grow a plant", 62, 31, 33, 66),
        Task("grow-fruit", "Biology", "Grow a fruit", 62, 31, 33, 95),
        Task("chemistry-mix", "Chemistry", "Mixing (generic)", 16, 8, 8, 24),
        Task("chemistry-mix-paint-secondary-color", "Chemistry", "Mixing paints (secondary colours)", 18, 9, 9, 33),
        Task("chemistry-mix-paint-tertiary-color", "Chemistry", "Mixing paints (tertiary colours)", 18, 9, 9, 39),
        Task("lifespan-longest-lived", "Biology", "Identify the longest-lived animal", 62, 31, 32, 8),
        Task("lifespan-shortest-lived", "Biology", "Identify the shortest-lived animal", 62, 31, 32, 8),
        Task(
            "lifespan-longest-lived-then-shortest-lived",
            "Biology",
            "Identify the longest- then shortest-lived animal",
            62,
            31,
            32,
            9,
        ),
        Task("identify-life-stages-1", "Biology", "Identify life stages (plant)", 6, 3, 5, 41),
        Task("identify-life-stages-2", "Biology", "Identify life stages (animal)", 4, 2, 4, 17),
        Task("inclined-plane-determine-angle", "Forces", "Inclined planes (determine the angle)", 84, 42, 42, 159),
        Task("inclined-plane-friction-named-surfaces", "Forces", "Friction (known surfaces)", 692, 346, 348, 106),
        Task("inclined-plane-friction-unnamed-surfaces", "Forces", "Friction (unknown surfaces)", 80, 40, 42, 202),
        Task("mendelian-genetics-known-plant", "Biology", "Mendelian genetics (known plants)", 60, 30, 30, 146),
        Task("mendelian-genetics-unknown-plant", "Biology", "Mendelian genetics (unknown plants)", 240, 120, 120, 261),
    )
}


class SciWorldEnv:
    """A `sciworld/<task>` game; `reset(seed)` loads variation `seed` of the task.

    Args:
        task: a ScienceWorld task name (a "sciworld/" prefix is accepted).
        simplifications: "" (none), "easy" (all) or a comma list of the engine's simplifications.
        gold_path: 1 to have the engine build a gold path at every reset (slower loads);
            `gold_actions()` builds one on demand otherwise.

    The Java engine starts at the first `reset` and is reused for every later one.
    """

    def __init__(self, task: str = "boil", *, simplifications: str = "", gold_path: int | bool = 0):
        import_suite("scienceworld", "scienceworld")
        self.task = _task(task)
        self.simplifications = str(simplifications)
        self.gold_path = bool(int(gold_path))
        self.name = f"{FAMILY}/{self.task.name}"
        self.engine = JavaEngine("ScienceWorld", self._start_engine)
        self.seed: int | None = None
        self.done = True
        self.score = 0
        self.moves = 0
        self._goal = ""
        self._templates: list[str] = []
        self._gold: list[str] | None = None

    def _start_engine(self):
        from scienceworld import ScienceWorldEnv

        return ScienceWorldEnv("", envStepLimit=STEP_LIMIT)

    def reset(self, seed: int) -> Observation:
        """Load variation `seed` and return the first observation (the first room's look)."""
        if seed not in range(self.task.n_variations):
            raise ValueError(
                f"{self.name} has variations 0-{self.task.n_variations - 1} "
                f"(train {_span(self.task.folds.train)}, dev {_span(self.task.folds.dev)}, "
                f"test {_span(self.task.folds.test)}); got seed {seed}"
            )
        self._load(seed, self.gold_path)
        with self.engine.guard(f"reset({seed})"):
            return self._observe(self._server.freeActionLook())

    def _load(self, seed: int, gold: bool) -> None:
        with self.engine.guard(f"load of variation {seed}"):
            raw = self.engine.handle
            raw.load(self.task.name, seed, self.simplifications, generateGoldPath=gold)
            self._goal = _strip_heading(raw.server.getTaskDescription())
            self._templates = [t for t in raw.server.getPossibleActions() if t not in REFUSED]
            self._gold = list(raw.server.getGoldActionSequence()) if gold else None
        self.seed, self.done, self.score, self.moves = seed, False, 0, 0

    @property
    def _server(self):
        return self.engine.handle.server

    def step(self, action: str) -> StepOutcome:
        """Play `action` (free text, mapped onto a valid action when the engine does not know it)."""
        if self.seed is None:
            raise RuntimeError("call reset(seed) before step()")
        if self.done:
            raise RuntimeError("the episode is over; call reset(seed) to start a new one")
        try:
            with self.engine.guard(f"step({action!r})"):
                return self._step(action)
        except EngineError:
            self.done = True
            raise

    def _step(self, action: str) -> StepOutcome:
        text = normalise_action(action)
        chosen, feedback = None, NO_MATCH
        if text and text not in REFUSED:
            chosen, feedback = self._send(text)
            if feedback.startswith(NO_MATCH):
                mapped = self._match_valid(text)
                chosen, feedback = self._send(mapped) if mapped else (None, NO_MATCH)
        if feedback.startswith(NO_MATCH):
            return StepOutcome(self._observe(invalid_feedback(action)), 0.0, False, self._info(None, True))
        self.moves += 1
        server = self._server
        score = int(round(100 * server.getScore()))
        reward, self.score = (score - self.score) / 100, score
        self.done = bool(server.getCompleted()) or score < 0
        return StepOutcome(self._observe(feedback), reward, self.done, self._info(chosen, False))

    def _send(self, text: str) -> tuple[str, str]:
        """Send `text`; an ambiguity question is answered with its first option."""
        server = self._server
        feedback = server.step(text)
        if feedback.startswith(AMBIGUOUS):
            first = re.search(r"^0:\s*(.+)$", feedback, flags=re.MULTILINE)
            text = first.group(1).strip() if first else text
            feedback = server.step("0")
        return text, feedback

    def _match_valid(self, text: str) -> str | None:
        valid = list(self._server.getValidActionObjectCombinations())
        loose: dict[str, list[str]] = {}
        for v in valid:
            loose.setdefault(without_articles(normalise_action(v)), []).append(v)
        key = without_articles(text)
        if key in loose:
            return loose[key][0] if len(loose[key]) == 1 else None
        if key.startswith("focus on"):
            return None
        close = difflib.get_close_matches(key, list(loose), n=1, cutoff=FUZZY_CUTOFF)
        return loose[close[0]][0] if close and len(loose[close[0]]) == 1 else None

    def valid_actions(self) -> list[str]:
        """Every action the engine accepts now (hundreds to thousands; kept out of the prompt,
        listed for the random baseline)."""
        return sorted(set(self._server.getValidActionObjectCombinations()) - REFUSED)

    def gold_actions(self) -> list[str]:
        """The engine's gold action sequence for the current variation, from its start.

        Without `gold_path=1` it is built on demand, which reloads the variation: call it
        right after `reset`.
        """
        if self.seed is None:
            raise RuntimeError("call reset(seed) before gold_actions()")
        if self._gold is None:
            if self.moves:
                raise RuntimeError(
                    "the gold path is built by reloading the game: call gold_actions() right after "
                    "reset(seed), or build the env with gold_path=1"
                )
            self._load(self.seed, gold=True)
        return list(self._gold or [])

    def close(self) -> None:
        """Shut the Java engine down; a later `reset` starts a new one."""
        self.engine.close()
        self.seed, self.done = None, True

    def _observe(self, text: str) -> Observation:
        hint = action_hint(self._templates, list(self._server.getPossibleObjects()))
        return Observation(text=f"{text.strip()}\n\n{hint}", goal=self._goal, admissible_actions=None)

    def _info(self, action: str | None, invalid: bool) -> dict[str, Any]:
        success = self.done and self.score >= 100
        return {
            "success": success,
            "won": success,
            "lost": self.score < 0,
            "score": self.score,
            "subgoals": parse_subgoals(self._server.getGoalProgressStr()),
            "invalid": invalid,
            "action": action,
        }


def action_hint(templates: list[str], objects: list[str], limit: int = HINT_LIMIT) -> str:
    """The compact block that stands in for the valid-action list.

    Example:
        >>> print(action_hint(["open OBJ", "look around"], ["door", "air"]))
        Actions you can use (OBJ is an object here): open OBJ, look around
        Objects here: door, air
    """
    shown, used = [], 0
    for name in objects:
        if used + len(name) + 2 > limit:
            shown.append("...")
            break
        shown.append(name)
        used += len(name) + 2
    return f"Actions you can use (OBJ is an object here): {', '.join(templates)}\nObjects here: {', '.join(shown)}"


def parse_subgoals(progress: str) -> dict[str, bool]:
    """The sequential sub-goals in the engine's goal-progress report, by name.

    Example:
        >>> parse_subgoals("Sequential Subgoals:\\n----\\n0\\ttrue\\tGoalFind\\tfocus on substance\\n----\\n")
        {'focus on substance': True}
    """
    _, _, rest = progress.partition("Sequential Subgoals:")
    reached: dict[str, bool] = {}
    for line in rest.splitlines():
        fields = [f.strip() for f in line.split("\t")]
        if line.startswith("Unordered"):
            break
        if len(fields) >= 4 and fields[0].isdigit():
            name = fields[3] or fields[2]
            key = name if name not in reached else f"{name} ({fields[0]})"
            reached[key] = fields[1] == "true"
    return reached


def _strip_heading(description: str) -> str:
    return description.strip().removeprefix("Task Description:").strip()


def _span(r: range) -> str:
    return f"{r.start}-{r.stop - 1}"


def _task(task: str) -> Task:
    name = task.removeprefix(f"{FAMILY}/")
    if name not in TASKS:
        raise ValueError(f"unknown ScienceWorld task {task!r}; choose one of {', '.join(TASKS)}")
    return TASKS[name]


SPECS: tuple[TaskSpec, ...] = tuple(
    TaskSpec(
        name=f"{FAMILY}/{_t.name}",
        factory=partial(SciWorldEnv, _t.name),
        description=f"ScienceWorld {_t.topic}: {_t.title}.",
        folds=_t.folds,
        max_steps=_t.max_steps,
    )
    for _t in TASKS.values()
)
