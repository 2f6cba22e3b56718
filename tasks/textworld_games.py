"""The `tw/<kind>` tasks: games made offline by TextWorld's generator, behind `TextEnv`.

Kinds are TextWorld's four challenges: `coin_collector` and `treasure_hunter` (knob `level`),
`simple` (`rewards` dense/balanced/sparse, `goal` detailed/brief/none) and `cooking` (`recipe`,
`take`, `go` 1/6/9/12, and 0/1 switches `open`, `cook`, `cut`, `drop`), e.g.
`tw/coin_collector?level=5` or `tw/cooking?recipe=2&take=2&go=6&open=1`. Each seed is one game,
generated and compiled (Inform 7, bundled with TextWorld, no network) the first time it is played
and cached as `<cache_dir>/<kind>/<settings>/<seed>.z8`; `cache_dir` defaults to
`$CRL_HOME/games` (`./.crl/games` without `CRL_HOME`).

Folds are the default seed ranges. Where the challenge has held-out content, the fold picks it:
`cooking` draws train seeds from TextWorld's train food split, dev from `valid`, test from `test`;
`simple` draws dev and test seeds from its test distribution. Seeds outside every fold count as
train.

Admissible actions, score, win and loss come from TextWorld (`EnvInfos`). An action that names
no admissible command is not sent to the game: it sets `info["invalid"]` and changes nothing.
Each point of score is a sub-goal: `info["subgoals"]` is `{"score_1": ..., "score_N": ...}` over
the game's maximum score N. `gold_actions()` is the game's walkthrough.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from crl.tasks.base import Observation, SeedFolds, StepOutcome, TaskSpec
from crl.tasks.java_engine import EngineError, import_suite, invalid_feedback, match_action

FAMILY = "tw"
FOLDS = SeedFolds()
GENERATION_TRIES = 10
_FLAGS = ("open", "cook", "cut", "drop")
CHOICES: dict[str, tuple[int | str, ...]] = {
    "rewards": ("dense", "balanced", "sparse"),
    "goal": ("detailed", "brief", "none"),
    "go": (1, 6, 9, 12),
    **{flag: (0, 1) for flag in _FLAGS},
}


@dataclass(frozen=True)
class Kind:
    """One TextWorld challenge: our name, TextWorld's, default settings and step limit."""

    name: str
    challenge: str
    description: str
    defaults: dict[str, int | str] = field(hash=False)
    max_steps: int


KINDS = {
    k.name: k
    for k in (
        Kind(
            "coin_collector",
            "tw-coin_collector",
            "Walk a chain of rooms to find and take the coin.",
            {"level": 5},
            10,
        ),
        Kind(
            "treasure_hunter",
            "tw-treasure_hunter",
            "Find the object the goal names in a maze and take it.",
            {"level": 10},
            10,
        ),
        Kind(
            "simple",
            "tw-simple",
            "A short house quest: keys, doors, containers and an object to deliver.",
            {"rewards": "dense", "goal": "detailed"},
            24,
        ),
        Kind(
            "cooking",
            "tw-cooking",
            "Read the cookbook, gather and prepare the ingredients, prepare the meal and eat it.",
            {"recipe": 1, "take": 1, "go": 1, "open": 0, "cook": 0, "cut": 0, "drop": 0},
            10,
        ),
    )
}


def default_cache_dir() -> Path:
    """Where generated games are kept: `$CRL_HOME/games`, or `./.crl/games`."""
    return Path(os.environ.get("CRL_HOME") or ".crl") / "games"


def fold_of(seed: int) -> str:
    """The fold of `seed` ("train" for seeds outside every fold)."""
    for fold in ("dev", "test"):
        if seed in FOLDS.get(fold):
            return fold
    return "train"


def challenge_settings(kind: Kind, settings: dict[str, int | str], seed: int) -> dict[str, Any]:
    """TextWorld's settings for one game of `kind`: ours, completed with the fold's split."""
    full: dict[str, Any] = dict(settings)
    fold = fold_of(seed)
    if kind.name == "simple":
        full["test"] = fold != "train"
    if kind.name == "cooking":
        full.update({flag: bool(int(full[flag])) for flag in _FLAGS})
        full["recipe_seed"] = 0
        full["split"] = {"train": "train", "dev": "valid", "test": "test"}[fold]
    return full


def game_path(cache_dir: Path, kind: Kind, settings: dict[str, int | str], seed: int) -> Path:
    """The cached game file of one seed; games of other settings live in other folders."""
    slug = ",".join(f"{k}={v}" for k, v in sorted(settings.items()))
    return Path(cache_dir) / kind.name / slug / f"{seed}.z8"


def ensure_game(cache_dir: Path, kind: Kind, settings: dict[str, int | str], seed: int) -> Path:
    """The game file of `seed`, generating and compiling it first if it is not cached.

    Generation writes into a private folder and moves the files into place, so workers that
    race on the same seed each produce the same game and never see a half-written one.
    """
    path = game_path(cache_dir, kind, settings, seed)
    if path.is_file():
        return path
    import textworld.generator

    path.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{seed}-", dir=path.parent))
    try:
        with warnings.catch_warnings():  # jericho's: it fully supports only the classic games
            warnings.filterwarnings("ignore", message=".*is not fully supported", category=UserWarning)
            game, options = _make_game(kind, settings, seed, str(work / path.name))
            compiled = Path(textworld.generator.compile_game(game, options))
        os.replace(compiled.with_suffix(".json"), path.with_suffix(".json"))
        os.replace(compiled, path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return path


def _make_game(kind: Kind, settings: dict[str, int | str], seed: int, path: str):
    """Generate the seed's game; a seed whose map cannot hold the quest moves to derived seeds."""
    import textworld
    import textworld.challenges
    from textworld.generator import QuestGenerationError

    _, make, _ = textworld.challenges.CHALLENGES[kind.challenge]
    for attempt in range(GENERATION_TRIES):
        options = textworld.GameOptions()
        # str seeding of random.Random is stable across processes, unlike hash()
        options.seeds = int(seed) if attempt == 0 else random.Random(f"{seed}/{attempt}").randrange(2**31)
        options.path = path
        options.file_ext = ".z8"
        try:
            return make(challenge_settings(kind, settings, seed), options), options
        except QuestGenerationError as exc:
            failure = exc
    raise ValueError(
        f"tw/{kind.name} with {settings} could not generate a game for seed {seed} "
        f"in {GENERATION_TRIES} tries ({failure}); try other settings"
    )


def clean_feedback(text: str) -> str:
    """The game's reply without Inform's prompt line and status bar, blank runs collapsed.

    Example:
        >>> clean_feedback("You are carrying nothing.\\n\\n\\n\\n>      -= Bathroom =-0/2")
        'You are carrying nothing.'
    """
    text = re.sub(r"(^|\n)>[^\n]*\s*$", "", text or "")
    return re.sub(r"\n\s*\n(\s*\n)+", "\n\n", text).strip()


class TextWorldEnv:
    """A `tw/<kind>` game; `reset(seed)` plays the seed's game (generated on first use).

    Args:
        kind: "coin_collector", "treasure_hunter", "simple" or "cooking" (a "tw/" prefix is accepted).
        cache_dir: where games are cached (default `default_cache_dir()`).
        **settings: the kind's generator settings (see `KINDS` for names and defaults).
    """

    def __init__(self, kind: str = "coin_collector", *, cache_dir: str | Path | None = None, **settings: int | str):
        import_suite("textworld", "textworld")
        self.kind = _kind(kind)
        unknown = sorted(set(settings) - set(self.kind.defaults))
        if unknown:
            raise ValueError(
                f"tw/{self.kind.name} has no setting {', '.join(unknown)}; "
                f"its settings: {', '.join(self.kind.defaults)}"
            )
        self.settings = {k: _setting(k, self.kind.defaults[k], v) for k, v in (self.kind.defaults | settings).items()}
        self.name = f"{FAMILY}/{self.kind.name}"
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self.seed: int | None = None
        self.done = True
        self._game: Any = None
        self._game_file: Path | None = None
        self._state: Any = None
        self._best = 0

    def reset(self, seed: int) -> Observation:
        """Start the seed's game and return the first observation (its opening room)."""
        path = ensure_game(self.cache_dir, self.kind, self.settings, seed)
        try:
            if self._game is None or self._game_file != path:
                self._close_game()
                self._game = self._start(path)
                self._game_file = path
            self._state = self._game.reset()
        except Exception as exc:  # the interpreter died; nothing of ours to keep
            self._close_game()
            raise EngineError(f"the TextWorld game {path} failed to start: {exc!r}; call reset(seed) to retry") from exc
        self.seed, self.done, self._best = seed, False, int(self._state.score or 0)
        return self._observe(clean_feedback(self._state.description))

    def _start(self, path: Path):
        import textworld

        infos = textworld.EnvInfos(
            admissible_commands=True,
            objective=True,
            description=True,
            score=True,
            max_score=True,
            won=True,
            lost=True,
            extras=["walkthrough"],
        )
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*is not fully supported", category=UserWarning)
            return textworld.start(str(path), request_infos=infos)

    def step(self, action: str) -> StepOutcome:
        """Play `action`; one that names no admissible command changes nothing and sets `info["invalid"]`."""
        if self.seed is None:
            raise RuntimeError("call reset(seed) before step()")
        if self.done:
            raise RuntimeError("the episode is over; call reset(seed) to start a new one")
        chosen = match_action(action, self._state.admissible_commands or [], move_verb="go")
        if chosen is None:
            return StepOutcome(self._observe(invalid_feedback(action)), 0.0, False, self._info(None))
        before = self._state.score or 0
        try:
            self._state, _, _ = self._game.step(chosen)
        except Exception as exc:
            self.done = True
            self._close_game()
            raise EngineError(
                f"the TextWorld game {self._game_file} failed on {chosen!r}: {exc!r}; "
                "this episode is lost: call reset(seed) to play it again"
            ) from exc
        score = self._state.score or 0
        self._best = max(self._best, int(score))
        self.done = bool(self._state.won or self._state.lost)
        reward = (score - before) / max(1, self._state.max_score or 1)
        return StepOutcome(self._observe(clean_feedback(self._state.feedback)), reward, self.done, self._info(chosen))

    def gold_actions(self) -> list[str]:
        """The game's walkthrough: a winning command sequence from its start."""
        if self.seed is None:
            raise RuntimeError("call reset(seed) before gold_actions()")
        return list(self._state.get("extra.walkthrough") or [])

    def close(self) -> None:
        """Stop the game interpreter."""
        self._close_game()
        self.seed, self.done = None, True

    def _close_game(self) -> None:
        game, self._game, self._game_file = self._game, None, None
        if game is not None:
            try:
                game.close()
            except Exception:  # already dead: nothing left to release
                pass

    def _observe(self, text: str) -> Observation:
        return Observation(
            text=(text or "").strip(),
            goal=(self._state.objective or "").strip(),
            admissible_actions=sorted(self._state.admissible_commands or []),
        )

    def _info(self, action: str | None) -> dict[str, Any]:
        state = self._state
        total = int(state.max_score or 0)
        return {
            "success": bool(state.won),
            "won": bool(state.won),
            "lost": bool(state.lost),
            "score": int(state.score or 0),
            "max_score": total,
            "subgoals": {f"score_{k}": k <= self._best for k in range(1, total + 1)},
            "invalid": action is None,
            "action": action,
        }


def _kind(kind: str) -> Kind:
    name = kind.removeprefix(f"{FAMILY}/")
    if name not in KINDS:
        raise ValueError(f"unknown TextWorld kind {kind!r}; choose one of {', '.join(KINDS)}")
    return KINDS[name]


def _setting(name: str, default: int | str, value: int | str) -> int | str:
    try:
        typed = int(value) if isinstance(default, int) else str(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if name in CHOICES and typed not in CHOICES[name]:
        raise ValueError(f"{name} must be one of {', '.join(map(str, CHOICES[name]))}, got {value!r}")
    return typed


SPECS: tuple[TaskSpec, ...] = tuple(
    TaskSpec(
        name=f"{FAMILY}/{_kind_spec.name}",
        factory=partial(TextWorldEnv, _kind_spec.name),
        description=f"TextWorld: {_kind_spec.description}",
        folds=FOLDS,
        max_steps=_kind_spec.max_steps,
        uses_cache_dir=True,
    )
    for _kind_spec in KINDS.values()
)
