"""Paired credit: move a memory by whether it made the difference on a seed (for experiments).

Online credit (`credit_episode`) compares an episode that used a memory with the family's
success rate, so a memory used on easy seeds looks good whatever it did. Paired credit asks
the question the Complementary RL extractor reward asks (Muhtar et al. 2026, arXiv
2603.17621): did the experience help the actor succeed? The same seeds are played twice by
the same actor, with memory and without, and every memory the with-memory episode used on
a seed is credited by the sign of the difference:

    d = success(with memory) - success(without memory)      on that seed, in {-1, 0, +1}

    d = +1   the memory was part of a win memory made:   a successful use, value toward 1
    d = -1   it was part of a loss memory caused:        an unsuccessful use, value toward 0
    d =  0   memory changed nothing: no credit (the seed says nothing about the memory)

Leaving ties out is McNemar's choice too: only discordant seeds carry information, so a
memory's utility after paired credit estimates P(helps | it made a difference).

Episodes are paired by task and seed (the k-th episode of a seed with the k-th of the same
seed, when a run repeats seeds); episodes that errored or never finished are left out. Each
credit entry names its pair (`paired` in the payload) and is journalled once: crediting the
same two runs again changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from crl.memory.actors import actor_key
from crl.memory.records import parse_record_id
from crl.memory.storage.episode_log import read_episodes
from crl.memory.trajectory import Episode


@dataclass
class PairedSeed:
    """One seed played with and without memory.

    Attributes:
        task, seed: the game.
        with_memory, without_memory: the two episode ids.
        diff: success with minus success without (-1, 0 or +1).
        ids: the memories the with-memory episode used (credited when `diff` is not 0).
    """

    task: str
    seed: int
    with_memory: str
    without_memory: str
    diff: int
    ids: list[str]


@dataclass
class PairedCreditReport:
    """What `paired_credit` did.

    Attributes:
        pairs: every seed paired, in the with-memory run's order.
        unpaired: episode ids with no partner (or left out: errored, unfinished).
        written: credit entries journalled now (pairs credited before are not written again).
    """

    pairs: list[PairedSeed] = field(default_factory=list)
    unpaired: list[str] = field(default_factory=list)
    written: int = 0

    @property
    def helped(self) -> int:
        """Seeds won with memory and lost without it."""
        return sum(1 for p in self.pairs if p.diff > 0)

    @property
    def hurt(self) -> int:
        """Seeds lost with memory and won without it."""
        return sum(1 for p in self.pairs if p.diff < 0)

    @property
    def ties(self) -> int:
        """Seeds with the same outcome either way."""
        return sum(1 for p in self.pairs if p.diff == 0)


def used_memory_ids(episode: Episode) -> list[str]:
    """The memory records an episode's prompts used (each once, in first-use order).

    Prompt items that are not records (action-value lines) are left out.
    """
    out: dict[str, None] = {}
    for step in episode.steps:
        prompt = step.extra.prompt
        for key in prompt.memory_keys if prompt is not None else []:
            try:
                parse_record_id(key)
            except ValueError:
                continue
            out[key] = None
    return list(out)


def _usable(episode: Episode) -> bool:
    return episode.finished and episode.status != "error"


def pair_episodes(
    with_memory: Sequence[Episode], without_memory: Sequence[Episode]
) -> tuple[list[tuple[Episode, Episode]], list[str]]:
    """Pair episodes by (task, seed), in order; returns the pairs and the ids left unpaired."""
    waiting: dict[tuple[str, int], list[Episode]] = {}
    unpaired: list[str] = []
    for ep in without_memory:
        if _usable(ep):
            waiting.setdefault((ep.task, ep.seed), []).append(ep)
        else:
            unpaired.append(ep.episode_id)
    pairs: list[tuple[Episode, Episode]] = []
    for ep in with_memory:
        partners = waiting.get((ep.task, ep.seed))
        if not _usable(ep) or not partners:
            unpaired.append(ep.episode_id)
            continue
        pairs.append((ep, partners.pop(0)))
    unpaired += [ep.episode_id for eps in waiting.values() for ep in eps]
    return pairs, unpaired


def paired_credit(
    bank,
    with_memory: Sequence[Episode],
    without_memory: Sequence[Episode],
    used_ids: Callable[[Episode], Sequence[str]] = used_memory_ids,
    actor: str | None = None,
) -> PairedCreditReport:
    """Credit the memories used with memory by the sign of the success difference on each seed.

    Args:
        bank: the `ExperienceBank`.
        with_memory: the episodes played with memory (their memories are credited).
        without_memory: the same seeds played by the same actor without memory.
        used_ids: which memories an episode used (default: its prompts' memory records).
        actor: who the journal says credited them (default "paired:<with run>/<without run>").

    Returns:
        The pairs, their differences, and how many credit entries were written.

    Raises:
        ValueError: a pair was played by two different actors.
    """
    pairs, unpaired = pair_episodes(with_memory, without_memory)
    report = PairedCreditReport(unpaired=unpaired)
    entries = []
    for w, wo in pairs:
        played_by = actor_key(w.model, w.adapter)
        if actor_key(wo.model, wo.adapter) != played_by:
            raise ValueError(
                f"episodes {w.episode_id} and {wo.episode_id} were played by different actors ({played_by} and "
                f"{actor_key(wo.model, wo.adapter)}); pair runs of the same model and adapter"
            )
        diff = int(w.success) - int(wo.success)
        ids = list(dict.fromkeys(used_ids(w)))
        report.pairs.append(PairedSeed(w.task, w.seed, w.episode_id, wo.episode_id, diff, ids))
        if diff == 0 or not ids:
            continue
        entries.append(
            bank.credit_entry(
                ids,
                diff > 0,
                target=1.0 if diff > 0 else 0.0,
                model_actor=played_by,
                once=f"paired:{w.episode_id}|{wo.episode_id}",
                paired={"task": w.task, "seed": w.seed, "with": w.episode_id, "without": wo.episode_id, "diff": diff},
            )
        )
    if pairs and actor is None:
        actor = f"paired:{pairs[0][0].run_id}/{pairs[0][1].run_id}"
    report.written = bank.write_once(entries, actor)
    return report


def paired_credit_runs(
    bank, with_run: str | Path, without_run: str | Path, actor: str | None = None
) -> PairedCreditReport:
    """`paired_credit` on two logged runs: run ids under the bank's runs directory, or run folders."""

    def episodes(run: str | Path) -> list[Episode]:
        folder = Path(run)
        if not (folder / "episodes.jsonl").is_file() and bank.runs_dir is not None:
            folder = bank.runs_dir / str(run)
        log = folder / "episodes.jsonl"
        if not log.is_file():
            raise FileNotFoundError(f"no run log {log}; give a run id under {bank.runs_dir} or a run folder")
        if folder.parent == bank.runs_dir:
            bank.check_run(folder.name)  # a run of another namespace credits nothing here
        return read_episodes(log)

    return paired_credit(bank, episodes(with_run), episodes(without_run), actor=actor)
