"""Resident memory over a long evaluation: does one process stay flat? (a benchmark, not a test)

Plays many episodes in one process through the library, as `crl eval` does (`start_run`, kind
"eval", the dev fold), with the embedded model loaded once, and samples the resident set size
(`VmRSS` of /proc/self/status) and the live agent records (Step, Episode, MemoryOffer,
PromptReport, counted with `gc.get_objects`) every N episodes. The verdict compares the largest
RSS after the warm-up (the first 10% of the episodes) with the RSS at the end of the warm-up:
"flat" when it is within 20%.

    CRL_THREADS=1 CRL_LLM__DTYPE=bf16 python bench/memory_growth.py --episodes 500
    CRL_THREADS=1 CRL_LLM__DTYPE=bf16 python bench/memory_growth.py --policy llm --no-memory --episodes 120
    python bench/memory_growth.py --pad-multiple 1 ...   # the behaviour before the fix (prompts unpadded)

A home with memory (`--seed-memory N` train episodes first, default 8) makes the eval retrieve
as it would in a used data home; `--json FILE` writes the samples and the verdict.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")

TRACKED = ("Step", "StepExtra", "Episode", "MemoryOffer", "PromptReport", "PolicyDecision", "ContextPack")


def rss_mb() -> float:
    """This process's resident set size in MB (`VmRSS`; 0 where /proc is missing)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class _Mallinfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def heap_mb() -> dict[str, float]:
    """glibc's view of the heap in MB: `in_use` (allocated from its arenas), `free` (held in the arenas
    but unallocated: fragmentation), `mmapped` (large blocks mapped on their own, e.g. tensors); empty
    where `mallinfo2` is missing. Tells a leak of small objects from fragmentation and from big buffers."""
    try:
        fn = ctypes.CDLL("libc.so.6").mallinfo2
    except (OSError, AttributeError):
        return {}
    fn.restype = _Mallinfo2
    m = fn()
    mb = 1024 * 1024
    return {"in_use": m.uordblks / mb, "free": m.fordblks / mb, "mmapped": m.hblkhd / mb}


def live_records() -> dict[str, int]:
    """How many objects of each tracked agent record type are alive now (after a collection)."""
    gc.collect()
    counts = Counter(type(o).__name__ for o in gc.get_objects())
    return {name: counts.get(name, 0) for name in TRACKED}


@dataclass
class Sample:
    """One reading: after `episodes` episodes, `seconds` into the eval."""

    episodes: int
    seconds: float
    rss_mb: float
    records: dict[str, int] = field(default_factory=dict)
    heap: dict[str, float] = field(default_factory=heap_mb)


@dataclass
class Verdict:
    """RSS after the warm-up against RSS at its end (`judge`)."""

    warmup_episodes: int
    base_mb: float
    max_after_mb: float
    end_mb: float
    growth: float
    tolerance: float

    @property
    def flat(self) -> bool:
        return self.growth <= self.tolerance

    def line(self) -> str:
        word = "flat" if self.flat else "NOT flat"
        return (
            f"{word} after warm-up within {self.tolerance:.0%}: max {self.max_after_mb:.0f} MB after the first "
            f"{self.warmup_episodes} episodes vs {self.base_mb:.0f} MB at their end ({self.growth:+.1%}); "
            f"end {self.end_mb:.0f} MB"
        )


def judge(samples: list[Sample], episodes: int, warmup_share: float = 0.1, tolerance: float = 0.2) -> Verdict:
    """The verdict over `samples` of a run of `episodes` episodes.

    The base is the last sample taken within the warm-up (the first `warmup_share` of the
    episodes); growth is the largest RSS of the later samples over it.

    Example: samples at 50, 100, 500 episodes of 500 with 1000, 1100, 1150 MB -> base 1000 MB,
    growth +15%, flat.

    Raises:
        ValueError: no sample inside the warm-up, or none after it.
    """
    warmup = max(1, round(episodes * warmup_share))
    inside = [s for s in samples if 0 < s.episodes <= warmup]
    after = [s for s in samples if s.episodes > warmup]
    if not inside or not after:
        raise ValueError(f"need samples within the first {warmup} episodes and after them; sample more often")
    base = inside[-1].rss_mb
    top = max(s.rss_mb for s in after)
    return Verdict(warmup, base, top, samples[-1].rss_mb, top / base - 1 if base else 0.0, tolerance)


class TimeUp(Exception):
    """The eval ran past `--max-minutes`: it stops, and the verdict covers the episodes played."""


class Sampler:
    """A runner `Progress` that takes a `Sample` every `every` finished episodes (and stops the
    run with `TimeUp` after `limit_s` seconds, when set)."""

    def __init__(self, every: int, started: float, limit_s: float | None = None):
        self.every = max(1, every)
        self.started = started
        self.limit_s = limit_s
        self.done = 0
        self.samples: list[Sample] = [Sample(0, 0.0, rss_mb(), live_records())]

    def episode_done(self, episode) -> None:
        self.done += 1
        if self.done % self.every == 0:
            self.samples.append(Sample(self.done, time.monotonic() - self.started, rss_mb(), live_records()))
            s = self.samples[-1]
            heap = " ".join(f"{k} {v:.0f}" for k, v in s.heap.items())
            print(f"  {s.episodes:>5} episodes  {s.seconds:>7.0f} s  {s.rss_mb:>7.0f} MB  heap MB: {heap}", flush=True)
        if self.limit_s is not None and time.monotonic() - self.started > self.limit_s:
            raise TimeUp(f"stopped after {self.done} episodes at the time limit")

    def steps_done(self, n: int) -> None:
        pass


def bench(args: argparse.Namespace, home: Path) -> dict:
    """Seed memory (optional), then play the eval and return the samples, the verdict and the run's report."""
    from crl.agent.app import acting_model, start_run
    from crl.agent.config import load_settings

    agent: dict = {"policy": args.policy}
    if args.parallel:
        agent["parallel"] = args.parallel
    overrides: dict = {"home": home, "agent": agent}
    if not args.memory:
        overrides["memory"] = {"enabled": False}
        agent["memory"] = "off"
    settings = load_settings(overrides)
    t = time.monotonic()
    model = acting_model(settings)
    if args.pad_multiple is not None:
        model.pad_multiple = args.pad_multiple
    load_s = time.monotonic() - t
    if args.memory and args.seed_memory:
        seeding = load_settings({"home": home, "agent": {"parallel": settings.agent.parallel}})
        print(f"seeding memory: {args.seed_memory} train episodes of {args.task}", flush=True)
        start_run(seeding, args.task, args.seed_memory, model=model)
    every = args.sample_every or max(1, args.episodes // 20)
    print(
        f"eval: {args.episodes} episodes of {args.task}, policy {settings.agent.policy}, "
        f"parallel {settings.agent.parallel}, memory {'on' if args.memory else 'off'}, "
        f"pad multiple {getattr(model, 'pad_multiple', '-')}, a sample every {every}",
        flush=True,
    )
    limit = args.max_minutes * 60 if args.max_minutes else None
    sampler = Sampler(every, time.monotonic(), limit)
    report: dict = {}
    stopped = None
    try:
        result = start_run(
            settings, args.task, args.episodes, fold=args.fold, kind="eval", model=model, progress=sampler
        )
        report = result.report()
    except TimeUp as e:
        stopped = str(e)
        print(stopped, flush=True)
    if sampler.samples[-1].episodes != sampler.done:
        sampler.samples.append(Sample(sampler.done, time.monotonic() - sampler.started, rss_mb(), live_records()))
    # a run stopped at its time limit keeps the warm-up it was planned (and sampled) for
    judged = args.episodes if stopped else sampler.done
    verdict = judge(sampler.samples, judged, args.warmup_share, args.tolerance)
    return {
        "task": args.task,
        "policy": settings.agent.policy,
        "parallel": settings.agent.parallel,
        "memory": args.memory,
        "dtype": settings.llm.dtype,
        "threads": os.environ.get("CRL_THREADS"),
        "pad_multiple": getattr(model, "pad_multiple", None),
        "model": getattr(model, "name", ""),
        "load_seconds": load_s,
        "episodes": sampler.done,
        "stopped": stopped,
        "success_rate": report.get("success_rate"),
        "steps_per_s": report.get("steps_per_s"),
        "wall_seconds": report.get("wall_seconds", time.monotonic() - sampler.started),
        "samples": [asdict(s) for s in sampler.samples],
        "verdict": asdict(verdict) | {"flat": verdict.flat, "line": verdict.line()},
    }


def print_table(out: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"RSS over {out['episodes']} episodes of {out['task']} ({out['policy']}, {out['dtype']})")
    for col in (
        "episodes",
        "seconds",
        "RSS MB",
        "vs warm-up end",
        "heap in use / free / mmapped MB",
        "Steps alive",
        "Episodes alive",
    ):
        table.add_column(col, justify="right")
    base = out["verdict"]["base_mb"]
    for s in out["samples"]:
        table.add_row(
            str(s["episodes"]),
            f"{s['seconds']:.0f}",
            f"{s['rss_mb']:.0f}",
            f"{s['rss_mb'] / base - 1:+.1%}" if base else "-",
            " / ".join(f"{s['heap'][k]:.0f}" for k in ("in_use", "free", "mmapped")) if s.get("heap") else "-",
            str(s["records"].get("Step", 0)),
            str(s["records"].get("Episode", 0)),
        )
    console = Console()
    console.print(table)
    if out["stopped"]:
        console.print(out["stopped"])
    else:
        console.print(f"success {out['success_rate']:.0%}, {out['steps_per_s']:.2f} steps/s")
    console.print(f"{out['wall_seconds']:.0f} s; pad multiple {out['pad_multiple']}")
    console.print(out["verdict"]["line"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="keyroom/key")
    ap.add_argument("--episodes", type=int, default=500)
    ap.add_argument("--policy", default="posterior", choices=["posterior", "llm", "memory", "mixed"])
    ap.add_argument("--parallel", type=int, default=None, help="episodes at once (default: agent.parallel)")
    ap.add_argument("--fold", default="dev", choices=["dev", "test"])
    ap.add_argument("--memory", action=argparse.BooleanOptionalAction, default=True, help="memory in the loop")
    ap.add_argument("--seed-memory", type=int, default=8, help="train episodes played first to fill memory")
    ap.add_argument("--sample-every", type=int, default=0, help="episodes between samples (default episodes/20)")
    ap.add_argument("--warmup-share", type=float, default=0.1)
    ap.add_argument("--tolerance", type=float, default=0.2)
    ap.add_argument(
        "--pad-multiple", type=int, default=None, help="override the model's prompt padding (1: before the fix)"
    )
    ap.add_argument("--max-minutes", type=float, default=None, help="stop the eval after this long (shared CPUs)")
    ap.add_argument("--home", default=None, help="data home (default: a fresh temporary one)")
    ap.add_argument("--json", default=None, help="write the samples and the verdict to this file")
    args = ap.parse_args()
    if args.episodes < 10:
        ap.error("--episodes must be at least 10 (the warm-up is a tenth of them)")
    if args.home:
        out = bench(args, Path(args.home))
    else:
        with tempfile.TemporaryDirectory(prefix="crl-memgrowth-") as home:
            out = bench(args, Path(home))
    print_table(out)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
