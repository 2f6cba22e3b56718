"""A small experience bank for the fine-tuning tests, filled by scripted agents on keyroom.

Successes come from the keyroom solver, failures from an agent that only says "look" (the
loop breaker sometimes stumbles into a success with it, which is fine). The bank embeds
with the deterministic hashing embedder, so no model is loaded.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

from crl.agent.app import start_run
from crl.agent.config import load_settings
from crl.agent.llm.scripted import ScriptedModel
from crl.finetune.dataset_card import write_dataset
from crl.finetune.registry import AdapterRegistry
from crl.finetune.sft_data import BuiltDataset
from crl.memory.bank import ExperienceBank
from crl.memory.storage.embeddings import HashingEmbedding
from crl.tasks.keyroom import solve
from crl.tasks.registry import fold_seeds


class WordCounter:
    """Counts tokens as `ScriptedModel` does (whitespace words), for replaying its prompts."""

    name = "scripted"

    def count_text(self, text: str) -> int:
        return len(text.split())

    def count_messages(self, messages) -> int:
        return sum(len(m["content"].split()) for m in messages)


def settings_for(home: Path, **agent):
    """Settings for generating runs (the llm policy): the fixtures log the replies they script."""
    agent.setdefault("reply_format", "action")
    agent.setdefault("policy", "llm")
    return load_settings({"home": str(home), "agent": agent, "memory": {"enabled": False}})


def solver_run(home: Path, task: str, n: int, seed_start: int = 0):
    variant = task.split("/", 1)[1]
    seeds = fold_seeds(task, "train", n, seed_start)
    model = ScriptedModel([" " + a for s in seeds for a in solve(s, variant)])
    return start_run(settings_for(home, parallel=1), task, n, seed_start=seed_start, model=model)


def looking_run(home: Path, task: str, n: int, max_steps: int = 5):
    model = ScriptedModel(lambda messages: " look")
    return start_run(settings_for(home, parallel=4, max_steps=max_steps), task, n, model=model)


def cycling_model(replies: list[str]) -> ScriptedModel:
    """Replies taken in turn from `replies`, forever."""
    turn = itertools.cycle(replies)
    return ScriptedModel(lambda messages: next(turn))


def open_bank(home: Path) -> ExperienceBank:
    return ExperienceBank(home / "memory", runs_dir=home / "runs", embedder=HashingEmbedding(64))


def fill_bank(home: Path) -> Path:
    """Solver successes on keyroom/key (4 seeds, two of them twice) and keyroom/door (2 seeds),
    "look" failures on the same keyroom/key seeds; everything synced into the bank."""
    solver_run(home, "keyroom/key", 4)
    solver_run(home, "keyroom/key", 2)  # exact duplicates of two episodes
    solver_run(home, "keyroom/door", 2)
    looking_run(home, "keyroom/key", 4)
    bank = open_bank(home)
    try:
        bank.sync()
    finally:
        bank.close()
    return home


def copy_home(source: Path, target: Path) -> Path:
    """A private copy of a filled data directory (for tests that change the bank)."""
    shutil.copytree(source, target)
    for lock in ("lock", "lock.owner"):
        (target / "memory" / lock).unlink(missing_ok=True)
    return target


BASE = "smollm2-135m-instruct"


def tiny_dataset(root: Path, name: str = "ds") -> Path:
    row = {
        "prompt": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
        "completion": [{"role": "assistant", "content": "Action: look"}],
        "task": "keyroom/key",
        "episode_id": "ep:keyroom:r-0000",
        "step_id": "st:keyroom:r-0000:0",
    }
    built = BuiltDataset(
        "sft", [row], source_episode_ids=["ep:keyroom:r-0000"], source_step_ids=["st:keyroom:r-0000:0"]
    )
    write_dataset(root / name, built, filters={"min_value": 0.0})
    return root / name


def fake_trained(root: Path, name: str) -> Path:
    folder = root / "trained" / name
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"r": 4}))
    (folder / "adapter_model.safetensors").write_bytes(b"weights")
    return folder


def register_fake(
    registry: AdapterRegistry, tmp_path: Path, adapter_id: str, parent: str | None = None, kind: str = "sft"
):
    return registry.register(
        adapter_id,
        kind,
        fake_trained(tmp_path, adapter_id),
        BASE,
        "/models/base",
        tiny_dataset(tmp_path, f"ds-{adapter_id}"),
        config={"lora_rank": 4},
        metrics={"train_loss": 1.0, "log_history": [{"loss": 1.0}]},
        parent=parent,
    )


def sft_of_successes(home: Path) -> BuiltDataset:
    """The SFT dataset of a data directory's successful episodes (no near-duplicate filter)."""
    from crl.finetune.config import FinetuneConfig
    from crl.finetune.sft_data import build_sft
    from crl.finetune.source import load_episodes

    bank = open_bank(home)
    try:
        bank.sync()
        config = FinetuneConfig(near_duplicate_similarity=None)
        return build_sft(load_episodes(bank, config, successes_only=True), config)
    finally:
        bank.close()
