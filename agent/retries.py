"""Evaluation with retries (the protocol of Reflexion and CLIN): the seeds an attempt lost are
played again, up to `attempts` times, and a seed counts as solved once any attempt won it.

Within an attempt memory is frozen, as in every evaluation. Between attempts, what the attempt
played is stored in a scratch memory (`<home>/retries/<first run id>/memory`), which the next
attempt reads: so a retry knows this very world's earlier tries (the moves that lost, the rooms
already searched), which no model weight can know. By default (`retry_memory="attempts"`) that
memory starts empty and holds only this evaluation's attempts (of every seed), so the first
attempt may even have played without memory; with `retry_memory="bank"` (`crl eval
--retry-memory bank`) it starts as a copy of the bank. Measured on dev seeds the attempts alone
did at least as well (keyroom/compound 96 of 96 within three attempts either way; twx/coin 94
against 92, where every world's kitchen reads the same and the bank's counts from other worlds
outweigh the one earlier try of this world), and nothing is copied. The user's own bank is never
written. Without memory in the loop a retry of a greedy policy replays its first attempt; the
attempts are still played, so the comparison between arms stays like for like.

Every retry is logged in that folder (`<home>/retries/<first run id>/evals`), memory or not, so
an interrupted series continues where it stopped (`resume=True`, `crl eval --resume`): finished
retries are kept and an interrupted one is resumed like any run.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crl.agent.app import RunResult, acting_model, loaded_adapter, open_bank, resume_run, start_run
from crl.agent.config import AgentSettings, Settings
from crl.agent.llm.base import ChatModel
from crl.agent.preflight import needs_bank, reads_memory
from crl.agent.runner import Progress, RunnerStats
from crl.agent.runs import RunInfo, RunStore
from crl.tasks.evaluation import wilson_interval
from crl.tasks.registry import fold_seeds

SCRATCH_DIR = "retries"
SERIES_FILE = "series.json"
RETRY_MEMORY = ("attempts", "bank")
DEFAULT_RETRY_MEMORY = "attempts"


@dataclass
class RetryResult:
    """Every attempt of an evaluation with retries, and where its scratch memory lives."""

    seeds: list[int]
    attempts: list[RunResult] = field(default_factory=list)
    scratch_home: Path | None = None
    retry_memory: str = DEFAULT_RETRY_MEMORY

    def first_win(self) -> dict[int, int | None]:
        """Seed -> the attempt (1-based) that first won it, None for a seed no attempt won."""
        won: dict[int, int | None] = {seed: None for seed in self.seeds}
        for number, attempt in enumerate(self.attempts, 1):
            for episode in attempt.episodes:
                if episode.finished and episode.success and won.get(episode.seed) is None:
                    won[episode.seed] = number
        return won

    def report(self) -> dict[str, Any]:
        """The first attempt's report, plus each attempt's counts and success within all of them."""
        wins = self.first_win()
        solved = sum(1 for a in wins.values() if a is not None)
        lo, hi = wilson_interval(solved, len(self.seeds))
        reports = [attempt.report() for attempt in self.attempts]
        rows = []
        for number, rep in enumerate(reports, 1):
            rows.append(
                {
                    "attempt": number,
                    "run_id": rep["run_id"],
                    "episodes": rep["episodes"],
                    "successes": rep["successes"],
                    "solved_so_far": sum(1 for a in wins.values() if a is not None and a <= number),
                    "memory": read_memory(self.attempts[number - 1].info),
                    "memory_overrides": rep.get("memory_overrides"),
                    "wall_seconds": rep["wall_seconds"],
                }
            )
        return reports[0] | {
            "attempts": rows,
            "solved_within": solved,
            "success_rate_within": solved / len(self.seeds) if self.seeds else 0.0,
            "ci95_within": [lo, hi],
            "first_win": {str(seed): a for seed, a in wins.items()},
            "scratch_home": str(self.scratch_home) if self.scratch_home else None,
            "retry_memory": self.retry_memory,
        }


def read_memory(info: RunInfo) -> bool:
    """Whether a logged evaluation read memory in the loop (`uses_memory_in_loop` on its settings snapshot)."""
    snapshot = info.settings or {}
    agent = snapshot.get("agent") or {}
    enabled = (snapshot.get("memory") or {}).get("enabled")
    defaults = AgentSettings.model_fields
    policy, prompt_memory = (agent.get(k, defaults[k].default) for k in ("policy", "memory"))
    return reads_memory(enabled, policy, prompt_memory)


def check_retries(settings: Settings, attempts: int, retry_memory: str = DEFAULT_RETRY_MEMORY) -> None:
    """Refuse what retries cannot do before anything is played."""
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    if retry_memory not in RETRY_MEMORY:
        raise ValueError(f"retry memory must be one of {', '.join(RETRY_MEMORY)}, got {retry_memory!r}")
    if attempts > 1 and needs_bank(settings, "eval") and settings.memory.server_mode:
        raise ValueError(
            "--attempts copies the embedded memory into a scratch folder for the retries to learn into; "
            "a memory server (memory.url) cannot be copied: evaluate with retries on an embedded memory"
        )


def scratch_memory(settings: Settings, first_run_id: str, copy_memory: bool = True) -> Settings:
    """Settings whose home is a fresh folder for one series of retries (`<home>/retries/<first
    run id>`, or `...-2`, `-3` when the same evaluation is retried again), holding a copy of
    `settings`' memory unless `copy_memory` is False (retries without memory only log there;
    retries that read only the attempts start from an empty memory)."""
    base = settings.home / SCRATCH_DIR / first_run_id
    home, n = base, 1
    while home.exists():
        n += 1
        home = base.with_name(f"{first_run_id}-{n}")
    home.mkdir(parents=True)
    if copy_memory and settings.memory_dir.is_dir():
        shutil.copytree(settings.memory_dir, home / "memory", ignore=shutil.ignore_patterns("lock", "lock.owner"))
    return settings.model_copy(update={"home": home})


def latest_scratch(settings: Settings, first_run_id: str) -> Settings | None:
    """Settings whose home is the latest series of retries of `first_run_id` (to resume it), or
    None when it was never retried here (then `--resume` starts the series, so a script can pass
    it every time)."""
    parent = settings.home / SCRATCH_DIR
    numbered = {_series_number(p.name, first_run_id): p for p in parent.glob(f"{first_run_id}*") if p.is_dir()}
    numbered.pop(None, None)
    if not numbered:
        return None
    return settings.model_copy(update={"home": numbered[max(numbered)]})


def check_series(scratch: Settings, retry_memory: str) -> None:
    """Refuse to resume a series of retries with another `retry_memory` than it was started with."""
    try:
        started = json.loads((scratch.home / SERIES_FILE).read_text()).get("retry_memory", "bank")
    except FileNotFoundError:
        return
    if started != retry_memory:
        raise ValueError(
            f"the retries under {scratch.home} read {started!r}: resume them with --retry-memory {started}"
        )


def _series_number(name: str, first_run_id: str) -> int | None:
    """1 for `<first run id>`, n for `<first run id>-n`, None for another folder."""
    if name == first_run_id:
        return 1
    suffix = name.removeprefix(f"{first_run_id}-")
    return int(suffix) if suffix != name and suffix.isdigit() else None


def new_draw(settings: Settings, attempt: int) -> Settings:
    """A sampled posterior draws afresh on each retry (draw = attempt - 1); greedy settings are unchanged."""
    posterior = settings.agent.posterior
    if posterior.mode != "sample" or attempt == 1:
        return settings
    agent = settings.agent.model_copy(update={"posterior": posterior.model_copy(update={"draw": attempt - 1})})
    return settings.model_copy(update={"agent": agent})


def store_attempt(scratch: Settings, store: RunStore, result: RunResult) -> None:
    """Ingest what an attempt played into the scratch memory, so the next attempt reads it."""
    bank = open_bank(scratch, actor=f"retries:{result.info.run_id}")
    try:
        report = bank.ingest_run_log(store.log_path(result.info.run_id))
    finally:
        bank.close()
    if report.errors:
        raise RuntimeError("could not store the attempt in the scratch memory: " + "; ".join(report.errors[:3]))


def earlier_attempt(
    settings: Settings,
    run_id: str,
    task: str,
    fold: str,
    model: ChatModel | None = None,
    retry_memory: str = DEFAULT_RETRY_MEMORY,
) -> RunResult:
    """A finished evaluation of this data directory taken as the first attempt (so a long
    evaluation need not be played again): it must be of the same task, fold, policy, memory and
    adapter as the retries (`model`'s adapter, else the settings' or the promoted one). Checked
    before any model loads. With `retry_memory` "attempts" the retries read no bank, so a first
    attempt played without memory (the model alone) may be retried with memory of its attempts
    (not the other way round)."""
    from crl.finetune.registry import adapter_folder, promoted_adapter_path

    store = RunStore(settings.evals_dir)
    info = store.load(run_id)
    snapshot = info.settings or {}
    acting = (
        (loaded_adapter(model) if model is not None else None)
        or settings.llm.adapter
        or promoted_adapter_path(settings, settings.llm.model)
    )

    def folder(ref: str | Path | None) -> Path | None:
        return adapter_folder(settings, ref).resolve() if ref else None

    was_adapter, now_adapter = folder(info.adapter), folder(acting)
    checks = {
        "kind": (info.kind, "eval"),
        "status": (info.status, "finished"),
        "task": (info.task, task),
        "fold": (snapshot.get("fold"), fold),
        "policy": ((snapshot.get("agent") or {}).get("policy"), settings.agent.policy),
        "memory.enabled": ((snapshot.get("memory") or {}).get("enabled"), settings.memory.enabled),
        "adapter": (was_adapter, was_adapter if same_registered(was_adapter, now_adapter) else now_adapter),
    }
    was_memory, now_memory = checks["memory.enabled"]
    if retry_memory == "attempts" and not was_memory and now_memory:
        checks.pop("memory.enabled")
    wrong = [f"{name} {was} (here {now})" for name, (was, now) in checks.items() if was != now]
    if wrong:
        raise ValueError(f"run {run_id} cannot be the first attempt: " + "; ".join(wrong))
    return logged_result(store, info)


def same_registered(a: Path | None, b: Path | None) -> bool:
    """Whether two adapter folders are the same registered adapter (`<home>/adapters/<id>/adapter`)
    of data directories copied or moved since: the same id in the registry's layout."""
    from crl.finetune.registry import ADAPTER_SUBDIR, ADAPTERS_DIR

    if a is None or b is None or a.name != ADAPTER_SUBDIR or b.name != ADAPTER_SUBDIR:
        return False
    return a.parent.name == b.parent.name and a.parent.parent.name == b.parent.parent.name == ADAPTERS_DIR


def logged_result(store: RunStore, info: RunInfo) -> RunResult:
    """A finished run read back from its log; its throughput figures come from its `run.json` times."""
    episodes = store.episodes(info.run_id)
    wall = (info.finished_at or info.created_at) - info.created_at
    return RunResult(info, episodes, RunnerStats(steps=sum(len(e.steps) for e in episodes), wall_seconds=wall))


def evaluate_with_retries(
    settings: Settings,
    task: str,
    episodes: int,
    attempts: int,
    fold: str = "dev",
    seed_start: int = 0,
    progress: Callable[[int, int], Any] | None = None,
    model: ChatModel | None = None,
    first: str | None = None,
    resume: bool = False,
    retry_memory: str = DEFAULT_RETRY_MEMORY,
) -> RetryResult:
    """Evaluate `task` on `episodes` seeds of `fold`, playing each lost seed again up to
    `attempts` times in all (module docstring). `progress(attempt, n)` opens a progress display
    for an attempt of n episodes (a context manager giving a `Progress`), or None. `model`: the
    model every attempt acts with (default: the settings' own). `first`: the id of a finished
    evaluation to take as the first attempt (`earlier_attempt`; its seeds replace `episodes` and
    `seed_start`). `resume`: continue the latest retries of `first` (`latest_scratch`): its
    finished attempts are kept, an interrupted one is resumed, the rest are played (with none
    yet, the retries start).
    `retry_memory`: what the retries read besides the earlier attempts: "attempts" (nothing
    else) or "bank" (a copy of the bank)."""
    check_retries(settings, attempts, retry_memory)
    if resume and not first:
        raise ValueError("resuming retries needs the first attempt's run id (--first)")
    earlier = earlier_attempt(settings, first, task, fold, model, retry_memory) if first else None
    scratch = latest_scratch(settings, first) if resume and first else None
    if scratch is not None:
        check_series(scratch, retry_memory)
    logged = RunStore(scratch.evals_dir).list() if scratch else []
    model = model or acting_model(settings)
    result = RetryResult(list(earlier.info.seeds) if earlier else fold_seeds(task, fold, episodes, seed_start))
    result.scratch_home = scratch.home if scratch else None
    result.retry_memory = retry_memory
    learns = attempts > 1 and needs_bank(settings, "eval")
    current = scratch or settings
    todo = list(result.seeds)
    for number in range(1, attempts + 1):
        played_in = settings if number == 1 else current
        if number == 1 and earlier is not None:
            result.attempts.append(earlier)
        elif 2 <= number < len(logged) + 2:
            result.attempts.append(_continued(current, logged[number - 2], todo, model, progress, number))
        else:
            result.attempts.append(_attempt(new_draw(current, number), task, fold, todo, model, progress, number))
        wins = result.first_win()
        todo = [seed for seed in result.seeds if wins[seed] is None]
        if not todo or number == attempts:
            break
        if result.scratch_home is None:
            copy = learns and retry_memory == "bank"
            current = scratch_memory(settings, result.attempts[0].info.run_id, copy_memory=copy)
            result.scratch_home = current.home
            (current.home / SERIES_FILE).write_text(
                json.dumps({"first": result.attempts[0].info.run_id, "retry_memory": retry_memory})
            )
        if learns:
            store_attempt(current, RunStore(played_in.evals_dir), result.attempts[-1])
    return result


def _continued(
    scratch: Settings,
    info: RunInfo,
    todo: list[int],
    model: ChatModel,
    progress: Callable[[int, int], Any] | None,
    number: int,
) -> RunResult:
    """Attempt `number` as logged in the series being resumed: kept when finished, else resumed."""
    if sorted(info.seeds) != sorted(todo):
        raise ValueError(
            f"retry {info.run_id} under {scratch.home} played seeds {sorted(info.seeds)}, but attempt {number} "
            f"should play the {len(todo)} still unsolved: these are not retries of this evaluation"
        )
    store = RunStore(scratch.evals_dir)
    if info.status == "finished":
        return logged_result(store, info)
    return _shown(progress, number, len(todo), lambda bar: resume_run(scratch, info.run_id, model=model, progress=bar))


def _attempt(
    settings: Settings,
    task: str,
    fold: str,
    seeds: list[int],
    model: ChatModel,
    progress: Callable[[int, int], Any] | None,
    number: int,
) -> RunResult:
    return _shown(
        progress,
        number,
        len(seeds),
        lambda bar: start_run(
            settings, task, len(seeds), fold=fold, kind="eval", model=model, progress=bar, seeds=seeds
        ),
    )


def _shown(
    progress: Callable[[int, int], Any] | None, number: int, n: int, play: Callable[[Progress | None], RunResult]
) -> RunResult:
    """`play(bar)` inside attempt `number`'s progress display of n episodes, or `play(None)` without one."""
    if progress is None:
        return play(None)
    with progress(number, n) as bar:
        return play(bar)
