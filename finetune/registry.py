"""The adapter registry: every trained adapter with its lineage, and which one is promoted per base model.

    <home>/adapters/<id>/adapter/         PEFT files (adapter_config.json, adapter_model.safetensors)
                   /<id>/lineage.json     base model, dataset (hash + card), parent, config, metrics, gate decisions
                   /<id>/dataset_card.json  the card of the dataset it was trained on (a copy)
    <home>/adapters/promotions.jsonl      append-only log: promote / rollback, with the gate's numbers

The promoted adapter of a base model is the replay of the log: `promote` pushes an adapter,
`rollback` pops back to the one promoted before it (or to no adapter). Nothing is rewritten
in place, so the history of promotions is an audit trail. Each entry changes the actor that
plays; the experience bank decays credit older actors left, once per entry (`Promotion.key`,
`last_change`, `memory.retrieval.actor_decay`).
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from filelock import FileLock
from pydantic import BaseModel, ConfigDict, Field

from crl.finetune.dataset_card import DatasetCard, read_card
from crl.finetune.errors import FinetuneError
from crl.memory.actors import actor_key

ADAPTERS_DIR = "adapters"
PROMOTIONS_FILE = "promotions.jsonl"
LINEAGE_FILE = "lineage.json"
CARD_COPY = "dataset_card.json"
ADAPTER_SUBDIR = "adapter"
log = logging.getLogger(__name__)
# The name the embedded model is known by (agent.llm.embedded.EMBEDDED_MODEL_NAME); an unset llm.model means it.
EMBEDDED_BASE = "smollm2-135m-instruct"


class AdapterNotFoundError(FinetuneError, LookupError):
    """No adapter with that id in the registry."""


def base_model_key(llm_model: str | None) -> str:
    """The key adapters are registered under for a configured `llm.model` (None: the embedded model)."""
    return llm_model or EMBEDDED_BASE


def adapters_home(settings_or_home: Any) -> Path:
    """`<home>/adapters` from a Settings object (anything with `.home`) or a home path."""
    home = settings_or_home if isinstance(settings_or_home, (str, os.PathLike)) else settings_or_home.home
    return Path(home) / ADAPTERS_DIR


class DatasetRef(BaseModel):
    """The dataset an adapter was trained on."""

    model_config = ConfigDict(extra="forbid")

    name: str
    path: str
    kind: str
    sha256: str
    examples: int
    tasks: list[str]


class GateRecord(BaseModel):
    """One gate decision on an adapter (see `finetune.gate`)."""

    model_config = ConfigDict(extra="forbid")

    time: float
    promoted: bool
    reason: str
    candidate_rate: float
    current: str | None = Field(description="The adapter it was compared with; None is the base model.")
    current_rate: float
    margin: float
    rule: str = Field("margin", description="The gate rule that decided: not-worse, better (paired) or margin.")
    alpha: float | None = Field(None, description="The paired test's significance level.")
    p_value: float | None = Field(None, description="The paired (McNemar) test's p-value, when one was computed.")
    tasks: dict[str, dict[str, Any]] = Field(default_factory=dict, description="Per task and side: successes/episodes.")


class Lineage(BaseModel):
    """Where an adapter came from and how it did."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kind: str = Field(description="sft or dpo.")
    base_model: str
    base_model_path: str
    dataset: DatasetRef
    parent: str | None = Field(None, description="The adapter this one continued training from.")
    namespace: str | None = Field(
        None,
        description="The memory namespace its dataset was built from (None: registered before this was recorded, "
        "the home's first namespace).",
    )
    config: dict[str, Any]
    metrics: dict[str, Any] = Field(default_factory=dict)
    created_at: float
    gate: list[GateRecord] = Field(default_factory=list)


class Promotion(BaseModel):
    """One line of promotions.jsonl."""

    model_config = ConfigDict(extra="forbid")

    op: str = Field(description="promote or rollback.")
    base_model: str
    adapter: str | None = Field(description="The adapter promoted after this entry (None: the base model alone).")
    previous: str | None
    time: float
    reason: str = ""
    actor: str = ""

    @property
    def key(self) -> str:
        """A key naming this entry (what the experience bank decays credit once for)."""
        return f"{self.op}:{self.base_model}:{self.adapter or '-'}:{self.time!r}"

    @property
    def model_actor(self) -> str:
        """The actor that plays after this entry (`memory.actors.actor_key`): base model + adapter."""
        return actor_key(self.base_model, self.adapter)


def new_adapter_id(kind: str) -> str:
    """A sortable, unique adapter id such as `sft-20261129-221530-3fa2`."""
    return f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"


class AdapterRegistry:
    """The adapters under `<home>/adapters`."""

    def __init__(self, root: str | Path):
        self.root = Path(root)

    @classmethod
    def of(cls, settings_or_home: Any) -> "AdapterRegistry":
        """The registry of a data directory (a Settings object or a home path)."""
        return cls(adapters_home(settings_or_home))

    def _lock(self) -> FileLock:
        self.root.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.root / ".lock"))

    def path(self, adapter_id: str) -> Path:
        return self.root / adapter_id

    def adapter_dir(self, adapter_id: str) -> Path:
        """The PEFT folder of an adapter (what `LocalChatModel(adapter=...)` loads)."""
        return self.path(adapter_id) / ADAPTER_SUBDIR

    # ---- adding and reading ----------------------------------------------------------------

    def register(
        self,
        adapter_id: str,
        kind: str,
        trained_dir: str | Path,
        base_model: str,
        base_model_path: str,
        dataset_dir: str | Path,
        config: dict[str, Any],
        metrics: dict[str, Any],
        parent: str | None = None,
    ) -> Lineage:
        """Copy a trained adapter folder into the registry with its lineage.

        Raises:
            ValueError: the id is taken, or `trained_dir` holds no adapter.
        """
        trained = Path(trained_dir)
        if not (trained / "adapter_config.json").is_file():
            raise ValueError(f"{trained} holds no trained adapter (adapter_config.json missing)")
        card = read_card(dataset_dir)
        lineage = Lineage(
            id=adapter_id,
            kind=kind,
            base_model=base_model,
            base_model_path=str(base_model_path),
            dataset=DatasetRef(
                name=card.name,
                path=str(Path(dataset_dir).resolve()),
                kind=card.kind,
                sha256=card.sha256,
                examples=card.examples,
                tasks=card.tasks,
            ),
            parent=parent,
            namespace=card.namespace,
            config=config,
            metrics={k: v for k, v in metrics.items() if k != "log_history"},
            created_at=time.time(),
        )
        with self._lock():
            target = self.path(adapter_id)
            if target.exists():
                raise ValueError(f"adapter {adapter_id} is already registered")
            staging = self.root / f".{adapter_id}.tmp"
            shutil.rmtree(staging, ignore_errors=True)
            shutil.copytree(trained, staging / ADAPTER_SUBDIR)
            (staging / CARD_COPY).write_text(card.model_dump_json(indent=2) + "\n")
            (staging / LINEAGE_FILE).write_text(lineage.model_dump_json(indent=2) + "\n")
            os.replace(staging, target)
        return lineage

    def get(self, adapter_id: str) -> Lineage:
        """The lineage of an adapter (an id or a unique prefix).

        Raises:
            AdapterNotFoundError: no such adapter.
        """
        return Lineage.model_validate_json((self.path(self.resolve(adapter_id)) / LINEAGE_FILE).read_text())

    def card(self, adapter_id: str) -> DatasetCard:
        """The card of the dataset the adapter was trained on."""
        return DatasetCard.model_validate_json((self.path(self.resolve(adapter_id)) / CARD_COPY).read_text())

    def resolve(self, ref: str) -> str:
        """An adapter id from an id or a unique prefix of one."""
        if (self.path(ref) / LINEAGE_FILE).is_file():
            return ref
        matches = [p.name for p in self._folders() if p.name.startswith(ref)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise AdapterNotFoundError(f"no adapter {ref!r} (see `crl adapters ls`)")
        raise AdapterNotFoundError(f"{ref!r} matches {len(matches)} adapters; give more of the id")

    def _folders(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.iterdir() if (p / LINEAGE_FILE).is_file())

    def ls(self, base_model: str | None = None) -> list[Lineage]:
        """Every adapter (of one base model, when given), oldest first."""
        out = [Lineage.model_validate_json((p / LINEAGE_FILE).read_text()) for p in self._folders()]
        if base_model is not None:
            out = [a for a in out if a.base_model == base_model]
        return sorted(out, key=lambda a: (a.created_at, a.id))

    def record_gate(self, adapter_id: str, decision: GateRecord) -> None:
        """Append a gate decision to the adapter's lineage."""
        with self._lock():
            lineage = self.get(adapter_id)
            lineage.gate.append(decision)
            self._write_lineage(lineage)

    def _write_lineage(self, lineage: Lineage) -> None:
        path = self.path(lineage.id) / LINEAGE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(lineage.model_dump_json(indent=2) + "\n")
        os.replace(tmp, path)

    # ---- promotion ---------------------------------------------------------------------------

    def promotions(self) -> list[Promotion]:
        """The promotion log, oldest first."""
        path = self.root / PROMOTIONS_FILE
        if not path.is_file():
            return []
        return [Promotion.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]

    def _stack(self, base_model: str) -> list[str]:
        stack: list[str] = []
        for entry in self.promotions():
            if entry.base_model != base_model:
                continue
            if entry.op == "promote" and entry.adapter:
                stack.append(entry.adapter)
            elif entry.op == "rollback" and stack:
                stack.pop()
        return stack

    def promoted(self, base_model: str) -> str | None:
        """The id of the promoted adapter of `base_model`, or None (the base model alone)."""
        stack = self._stack(base_model)
        return stack[-1] if stack else None

    def last_change(self, base_model: str) -> Promotion | None:
        """The latest promote or rollback of `base_model`: the change the experience bank should be
        aligned with (`memory.retrieval.actor_decay.decay_older_actors(bank, c.key, c.model_actor)`)."""
        changes = [p for p in self.promotions() if p.base_model == base_model]
        return changes[-1] if changes else None

    def promote(self, adapter_id: str, reason: str = "", actor: str = "") -> Promotion:
        """Make `adapter_id` the promoted adapter of its base model."""
        with self._lock():
            lineage = self.get(adapter_id)
            previous = self.promoted(lineage.base_model)
            if previous == lineage.id:
                raise ValueError(f"adapter {lineage.id} is already the promoted one")
            return self._append(
                Promotion(
                    op="promote",
                    base_model=lineage.base_model,
                    adapter=lineage.id,
                    previous=previous,
                    time=time.time(),
                    reason=reason,
                    actor=actor,
                )
            )

    def rollback(self, base_model: str, reason: str = "", actor: str = "") -> Promotion:
        """Restore the adapter promoted before the current one (or the bare base model).

        Raises:
            ValueError: nothing is promoted for `base_model`.
        """
        with self._lock():
            stack = self._stack(base_model)
            if not stack:
                raise ValueError(f"no adapter is promoted for {base_model}; nothing to roll back")
            restored = stack[-2] if len(stack) > 1 else None
            return self._append(
                Promotion(
                    op="rollback",
                    base_model=base_model,
                    adapter=restored,
                    previous=stack[-1],
                    time=time.time(),
                    reason=reason,
                    actor=actor,
                )
            )

    def _append(self, entry: Promotion) -> Promotion:
        with open(self.root / PROMOTIONS_FILE, "a") as f:
            f.write(entry.model_dump_json() + "\n")
            f.flush()
            os.fsync(f.fileno())
        return entry

    def rm(self, adapter_id: str) -> str:
        """Delete an adapter that is not promoted now and not in the rollback history.

        Raises:
            ValueError: the adapter is promoted or a rollback could restore it.
        """
        with self._lock():
            lineage = self.get(adapter_id)
            if lineage.id in self._stack(lineage.base_model):
                raise ValueError(
                    f"adapter {lineage.id} is promoted or a rollback would restore it; roll back past it first"
                )
            shutil.rmtree(self.path(lineage.id))
            return lineage.id


def registered_adapter_id(folder: str | Path) -> str | None:
    """The id of the registered adapter whose PEFT folder is `folder` (`<id>/adapter`), else None."""
    folder = Path(folder)
    if folder.name == ADAPTER_SUBDIR and (folder.parent / LINEAGE_FILE).is_file():
        return folder.parent.name
    return None


def adapter_folder(settings_or_home: Any, ref: str | Path) -> Path:
    """The PEFT folder `--adapter` means: a folder holding an adapter as given, a registered adapter's
    own folder (`<id>/`) as its `adapter/` inside, else a registered id or unique id prefix of the
    home's registry (`crl adapters ls`); anything else is returned as given, for the loader to report."""
    path = Path(ref)
    if (path / "adapter_config.json").is_file():
        return path
    if (path / ADAPTER_SUBDIR / "adapter_config.json").is_file():
        return path / ADAPTER_SUBDIR
    if path.exists() or len(path.parts) != 1:
        return path
    registry = AdapterRegistry.of(settings_or_home)
    try:
        return registry.adapter_dir(registry.resolve(str(ref)))
    except AdapterNotFoundError:
        return path


def promoted_adapter_path(settings_or_home: Any, base_model: str | None) -> Path | None:
    """The folder of the promoted adapter of `base_model` (a `llm.model` value; None: embedded), if any.

    The local backend calls this when no adapter is configured, so the agent uses the
    promoted adapter automatically. The registry and its promotions are the home's, shared by
    its memory namespaces: given settings whose namespace is not the one the adapter's data came
    from, it says so in a warning.
    """
    registry = AdapterRegistry.of(settings_or_home)
    adapter = registry.promoted(base_model_key(base_model))
    if adapter is None:
        return None
    path = registry.adapter_dir(adapter)
    if not (path / "adapter_config.json").is_file():
        return None
    playing = getattr(getattr(settings_or_home, "memory", None), "namespace", None)
    learned = registry.get(adapter).namespace
    if playing and learned and learned != playing:
        log.warning(
            "the promoted adapter %s learned from memory namespace %r and now plays for %r (a home's namespaces "
            "share its promotions); give --adapter, or a data home per namespace, to keep their models apart",
            adapter,
            learned,
            playing,
        )
    return path
