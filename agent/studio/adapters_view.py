"""The studio's adapters side: lineage, metrics and gate decisions (`crl adapters ls/show`), and
promotion without the gate or rollback (`crl adapters promote --force`, `crl adapters rollback`),
through the same `AdapterRegistry` calls; contamination by records marked malicious as `crl adapters ls/show`
reports it (`crl.finetune.contamination.adapter_taints`)."""

from __future__ import annotations

from typing import Any

from crl.finetune.contamination import AdapterTaint
from crl.finetune.registry import AdapterRegistry, Lineage

from .memory_view import STUDIO_ACTOR


def gate_row(g) -> dict[str, Any]:
    """A gate decision as JSON (with its paired test's p-value when one was computed)."""
    return g.model_dump(mode="json")


def taint_fields(taint: AdapterTaint | None) -> dict[str, Any]:
    """An adapter's contamination by malicious records, in the fields `crl adapters ls/show --json` use."""
    if taint is None:
        return {"malicious_sources": [], "malicious_prompts": [], "malicious_via": None, "contaminated": False}
    return {
        "malicious_sources": taint.records,
        "malicious_prompts": taint.prompted,
        "malicious_via": taint.via,
        "contaminated": taint.contaminated,
    }


def adapter_row(
    registry: AdapterRegistry, a: Lineage, quarantined: set[str], taints: dict[str, AdapterTaint]
) -> dict[str, Any]:
    """An adapter as the adapters list shows it, flagged when trained on malicious or since-quarantined memories."""
    card = registry.card(a.id)
    tainted = sorted(set(card.source_episode_ids + card.source_step_ids) & quarantined)
    last = a.gate[-1] if a.gate else None
    return {
        "id": a.id,
        "kind": a.kind,
        "base_model": a.base_model,
        "namespace": a.namespace,
        "parent": a.parent,
        "dataset": a.dataset.name,
        "examples": a.dataset.examples,
        "created_at": a.created_at,
        "promoted": registry.promoted(a.base_model) == a.id,
        "gate": None if last is None else gate_row(last),
        "quarantined_sources": tainted,
    } | taint_fields(taints.get(a.id))


def adapters(registry: AdapterRegistry, quarantined: set[str], taints: dict[str, AdapterTaint]) -> dict[str, Any]:
    """Every adapter, oldest first, and the promotion log (newest first)."""
    return {
        "root": str(registry.root),
        "adapters": [adapter_row(registry, a, quarantined, taints) for a in registry.ls()],
        "promotions": [p.model_dump(mode="json") for p in reversed(registry.promotions())],
    }


def adapter(registry: AdapterRegistry, ref: str, taints: dict[str, AdapterTaint]) -> dict[str, Any]:
    """An adapter's full lineage with its parents' chain and its contamination (`crl adapters show`).

    Raises:
        AdapterNotFoundError: no such adapter.
    """
    lineage = registry.get(ref)
    chain, parent = [], lineage.parent
    while parent and len(chain) < 50:
        chain.append(parent)
        try:
            parent = registry.get(parent).parent
        except LookupError:
            break
    return (
        lineage.model_dump(mode="json")
        | {
            "path": str(registry.adapter_dir(lineage.id)),
            "promoted": registry.promoted(lineage.base_model) == lineage.id,
            "ancestors": chain,
            "children": [a.id for a in registry.ls() if a.parent == lineage.id],
        }
        | taint_fields(taints.get(lineage.id))
    )


def promote(registry: AdapterRegistry, ref: str) -> dict[str, Any]:
    """Promote an adapter by hand, without the evaluation gate (recorded as manual, as `--force` is)."""
    lineage = registry.get(ref)
    entry = registry.promote(lineage.id, reason="manual (studio, no gate)", actor=STUDIO_ACTOR)
    return entry.model_dump(mode="json")


def rollback(registry: AdapterRegistry, base_model: str) -> dict[str, Any]:
    """Restore the adapter promoted before the current one of `base_model` (or none)."""
    if not base_model:
        raise ValueError("name the base model to roll back")
    entry = registry.rollback(base_model, reason="rollback (studio)", actor=STUDIO_ACTOR)
    return entry.model_dump(mode="json")
