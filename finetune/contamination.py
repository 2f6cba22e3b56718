"""Adapters contaminated by malicious memories: trained on a dataset that included a record now
marked malicious (`memory.contamination`) as a row or inside a row's prompt (a memory retrieved at
that step), or continued from an adapter that was.

Computed each time from the adapters' dataset cards (their `source_episode_ids`,
`source_step_ids` and `prompt_memory_ids`) and the journals' marks, never stored, so a mark made (or cleared) after
training shows at once. An adapter's data came from one memory namespace (`Lineage.namespace`;
None for adapters registered before it was recorded: the home's first namespace), and only
that namespace's marks count for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from crl.finetune.registry import AdapterRegistry, Lineage
from crl.memory.contamination import owner_episode, read_marks


@dataclass
class AdapterTaint:
    """How an adapter is contaminated.

    Attributes:
        adapter: its id.
        namespace: the memory namespace its data came from (None: the home's first).
        records: the malicious records its own dataset included (a step of a malicious episode
            counts as the episode), sorted.
        prompted: the malicious records retrieved into the prompts its dataset trains on
            (`DatasetCard.prompt_memory_ids`), sorted.
        via: the nearest ancestor (`parent`, its parent, ...) whose dataset included one, if any.
    """

    adapter: str
    namespace: str | None
    records: list[str] = field(default_factory=list)
    prompted: list[str] = field(default_factory=list)
    via: str | None = None

    @property
    def own(self) -> bool:
        """Whether its own dataset holds malicious data (rows or prompts), not only a parent's."""
        return bool(self.records or self.prompted)

    @property
    def contaminated(self) -> bool:
        return self.own or self.via is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"contaminated": self.contaminated}


def marked_sources(source_ids: Iterable[str], marked: set[str]) -> list[str]:
    """The marked records behind `source_ids`: an id that is marked, or a step's marked episode.

    Example:
        >>> marked_sources(["ep:k:r-1", "st:k:r-1:0", "st:k:r-2:3"], {"ep:k:r-1", "st:k:r-2:3"})
        ['ep:k:r-1', 'st:k:r-2:3']
    """
    out = set()
    for rid in source_ids:
        if rid in marked:
            out.add(rid)
        elif rid.startswith("st:") and owner_episode(rid) in marked:
            out.add(owner_episode(rid))
    return sorted(out)


def adapter_taints(registry: AdapterRegistry, marks_of: Callable[[str | None], set[str]]) -> dict[str, AdapterTaint]:
    """Every registered adapter's contamination, by id.

    Args:
        registry: the adapter registry.
        marks_of: the marked record ids of a namespace (None: the home's first namespace).
    """
    lineages = {a.id: a for a in registry.ls()}
    taints: dict[str, AdapterTaint] = {}
    for a in lineages.values():
        try:
            card = registry.card(a.id)
        except (OSError, ValueError):
            taints[a.id] = AdapterTaint(a.id, a.namespace)
            continue
        marked = marks_of(a.namespace)
        records = marked_sources(card.source_episode_ids + card.source_step_ids, marked)
        taints[a.id] = AdapterTaint(a.id, a.namespace, records, marked_sources(card.prompt_memory_ids, marked))
    for a in lineages.values():
        taints[a.id].via = _tainted_ancestor(a, lineages, taints)
    return taints


def _tainted_ancestor(adapter: Lineage, lineages: dict[str, Lineage], taints: dict[str, AdapterTaint]) -> str | None:
    seen = {adapter.id}
    parent = adapter.parent
    while parent and parent not in seen and parent in lineages:
        if taints[parent].own:
            return parent
        seen.add(parent)
        parent = lineages[parent].parent
    return None


def home_marks(memory_dir: str | Path) -> Callable[[str | None], set[str]]:
    """`marks_of` for `adapter_taints` reading each namespace's journal under `memory_dir` once."""
    cache: dict[str | None, set[str]] = {}

    def marks_of(namespace: str | None) -> set[str]:
        if namespace not in cache:
            cache[namespace] = set(read_marks(memory_dir, namespace))
        return cache[namespace]

    return marks_of
