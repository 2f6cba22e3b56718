"""What `crl memory quarantine --malicious` reports: the records marked, and the rules, synthetic
episodes and adapters they contaminated, as JSON and as one table for people."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from crl.finetune.contamination import adapter_taints
from crl.finetune.registry import AdapterRegistry
from crl.memory.contamination import MaliciousReport


def contamination_report(bank: Any, report: MaliciousReport, registry: AdapterRegistry) -> dict[str, Any]:
    """The report as JSON, with the adapters whose datasets included the marked records or what was
    derived from them (synthetic episodes as rows, derived rules in prompts), as rows or inside the
    prompts they train on, or that continued from such an adapter.

    Only adapters whose data came from the bank's namespace are checked (`Lineage.namespace`;
    an adapter that records none belongs to the home's first namespace).
    """
    tainted = set(report.ids) | {s["id"] for s in report.synthetic} | {r.id for r in report.rules}

    def marks_of(namespace: str | None) -> set[str]:
        mine = namespace == bank.namespace or (namespace is None and bank.primary)
        return tainted if mine else set()

    adapters = []
    for taint in adapter_taints(registry, marks_of).values():
        if not taint.contaminated:
            continue
        lineage = registry.get(taint.adapter)
        adapters.append(taint.to_dict() | {"promoted": registry.promoted(lineage.base_model) == lineage.id})
    return {
        "marked": report.ids,
        "reason": report.reason,
        "rules": [r.to_dict() for r in report.rules],
        "synthetic": report.synthetic,
        "adapters": adapters,
        "rules_quarantined": report.rules_quarantined,
        "synthetic_quarantined": report.synthetic_quarantined,
    }


def _rows(data: dict[str, Any]) -> list[tuple[str, str, str, Text]]:
    rows = []
    for r in data["rules"]:
        state = r["tier"] if r["exists"] else "removed"
        rows.append(("rule", r["id"], f"{', '.join(r['how'])} from {', '.join(r['sources'])}", Text(state)))
    for s in data["synthetic"]:
        state = "quarantine" if s["quarantined"] else "in memory"
        rows.append(("synthetic", s["id"], f"made from {', '.join(s['parents'])}", Text(state)))
    for a in data["adapters"]:
        if a["records"]:
            how = f"trained on {', '.join(a['records'])}"
        elif a["prompted"]:
            how = f"{', '.join(a['prompted'])} in its training prompts"
        else:
            how = f"continued from {a['via']}"
        state = Text("promoted", style="bold red") if a["promoted"] else Text("registered")
        rows.append(("adapter", a["adapter"], how, state))
    return rows


def render_contamination(out: Console, data: dict[str, Any]) -> None:
    """Print the marked records, one table of what they contaminated, and what to do next."""
    reason = f" ({data['reason']})" if data["reason"] else ""
    out.print(
        f"[bold magenta]quarantined and marked malicious[/] {len(data['marked'])} record(s){escape(reason)}: "
        + escape(", ".join(data["marked"])),
        highlight=False,
    )
    rows = _rows(data)
    if not rows:
        out.print("nothing derived from them: no rule, synthetic episode or adapter names them", highlight=False)
        return
    table = Table(title=f"contaminated by them: {len(rows)}", title_justify="left")
    for name, wrap in (("kind", False), ("id", False), ("how", True), ("now", False)):
        table.add_column(name, no_wrap=not wrap, overflow="fold" if wrap else "ellipsis")
    for kind, rid, how, state in rows:
        table.add_row(kind, Text(rid), Text(how), state)
    out.print(table)
    hints = []
    if any(r["exists"] and r["tier"] != "quarantine" for r in data["rules"]):
        hints.append("quarantine the derived rules too: add --with-rules")
    if any(not s["quarantined"] for s in data["synthetic"]):
        hints.append("quarantine the synthetic episodes made from them: add --with-synthetic")
    if any(a["promoted"] for a in data["adapters"]):
        hints.append("a contaminated adapter is promoted: `crl adapters rollback` restores the one before it")
    if data["adapters"]:
        hints.append("`crl adapters ls` flags the contaminated adapters from now on")
    for hint in hints:
        out.print(f"[dim]{escape(hint)}[/]", highlight=False)
