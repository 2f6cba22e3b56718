"""The report of the section-5 experiment (`crl experiment skills`): per arm and point, pooled
success with 95% intervals, the test fold, McNemar pairs of the final points, the ratio of
environment steps to the from-scratch learner's final success; `table.md` and `curve.png`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crl.agent.experiment import pooled_points
from crl.agent.skills_experiment import subtasks_of
from crl.tasks.evaluation import discordant, mcnemar_p, wilson_interval

ADAPTER_ALONE = "sft alone"
"""The arm name of the `skills+sft` adapter evaluated without memory (its point's `adapter_alone`)."""


def with_adapter_alone(results: dict[str, Any]) -> dict[str, Any]:
    """`results` with one more run per `skills+sft` repeat whose points recorded the adapter alone:
    arm `sft alone`, those evaluations as its points, one per SFT round (results that have them
    already are returned as they are)."""
    if any(r["arm"] == ADAPTER_ALONE for r in results["runs"]):
        return results
    extra = []
    for r in results["runs"]:
        if r["arm"] != "skills+sft":
            continue
        alone = [p["detail"]["adapter_alone"] for p in r["points"] if p["detail"].get("adapter_alone")]
        if alone:
            extra.append({"arm": ADAPTER_ALONE, "repeat": r["repeat"], "points": alone, "test": None})
    return dict(results, runs=results["runs"] + extra) if extra else results


def summarise(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per arm and point: mean env steps over repeats, pooled success with a 95% interval."""
    rows = []
    for arm, pts, s, e, (lo, hi) in pooled_points(results):
        rows.append(
            {
                "arm": arm,
                "stage": pts[0]["stage"],
                "env_steps": sum(p["env_steps"] for p in pts) / len(pts),
                "success_rate": s / e if e else 0.0,
                "ci95": [lo, hi],
                "successes": s,
                "episodes": e,
                "repeats": len(pts),
                "per_repeat": [p["successes"] / p["episodes"] if p["episodes"] else 0.0 for p in pts],
            }
        )
    return rows


def test_rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per arm: the final point on the test fold, pooled over repeats."""
    rows = []
    by_arm: dict[str, list[dict]] = {}
    for r in results["runs"]:
        if r.get("test"):
            by_arm.setdefault(r["arm"], []).append(r["test"])
    for arm, tests in by_arm.items():
        s, e = sum(t["successes"] for t in tests), sum(t["episodes"] for t in tests)
        lo, hi = wilson_interval(s, e)
        rows.append({"arm": arm, "success_rate": s / e if e else 0.0, "ci95": [lo, hi], "successes": s, "episodes": e})
    return rows


def final_pairs(results: dict[str, Any]) -> list[dict[str, Any]]:
    """McNemar's exact test between the final (or, for an arm-repeat cut short, the latest) dev points
    of each pair of arms, on the (repeat, seed) pairs both played. The model alone, played once
    because it is deterministic, stands for every repeat; any other arm pairs only where it played."""
    finals: dict[str, dict[int, dict[str, bool]]] = {}
    for r in results["runs"]:
        if r["points"]:
            finals.setdefault(r["arm"], {})[r["repeat"]] = r["points"][-1]["outcomes"]

    def final(arm: str, repeat: int) -> dict[str, bool] | None:
        got = finals[arm].get(repeat)
        if got is None and arm == "none" and len(finals[arm]) == 1:
            return next(iter(finals[arm].values()))
        return got

    arms = list(finals)
    rows = []
    for i, a in enumerate(arms):
        for b in arms[i + 1 :]:
            pa, pb = [], []
            for rep in sorted(set(finals[a]) | set(finals[b])):
                oa, ob = final(a, rep), final(b, rep)
                if oa is None or ob is None:
                    continue
                for seed in sorted(set(oa) & set(ob)):
                    pa.append(oa[seed])
                    pb.append(ob[seed])
            a_only, b_only = discordant(pa, pb)
            rows.append(
                {
                    "arm_a": a,
                    "arm_b": b,
                    "pairs": len(pa),
                    "a": sum(pa),
                    "b": sum(pb),
                    "a_only": a_only,
                    "b_only": b_only,
                    "mcnemar_p": mcnemar_p(pa, pb) if pa else None,
                }
            )
    return rows


def step_ratio(rows: list[dict[str, Any]], arm: str, baseline: str = "drrn") -> dict[str, Any] | None:
    """Env steps `arm` needed to reach the baseline's final success, over the steps the baseline
    needed to first reach it (the seed claims about 0.1); None without both arms."""
    base = [r for r in rows if r["arm"] == baseline]
    mine = [r for r in rows if r["arm"] == arm]
    if not base or not mine:
        return None
    target = base[-1]["success_rate"]
    base_steps = next(r["env_steps"] for r in base if r["success_rate"] >= target)
    reached = next((r for r in mine if r["success_rate"] >= target), None)
    return {
        "arm": arm,
        "target": target,
        "baseline_steps": base_steps,
        "arm_steps": reached["env_steps"] if reached else None,
        "ratio": reached["env_steps"] / base_steps if reached and base_steps else None,
        "arm_final": mine[-1]["success_rate"],
        "arm_final_steps": mine[-1]["env_steps"],
    }


def write_report(results: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """Write `curve.png` (dev success against env steps learned from, 95% bands) and `table.md`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = with_adapter_alone(results)
    spec, rows = results["spec"], summarise(results)
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    for arm in dict.fromkeys(r["arm"] for r in rows):
        pts = [r for r in rows if r["arm"] == arm]
        x = [max(p["env_steps"], 1) for p in pts]
        y = [p["success_rate"] for p in pts]
        ax.plot(x, y, marker="o", label=f"{arm} ({pts[0]['repeats']} repeat{'s' if pts[0]['repeats'] > 1 else ''})")
        ax.fill_between(x, [p["ci95"][0] for p in pts], [p["ci95"][1] for p in pts], alpha=0.15)
    ax.set_xscale("log")
    ax.set_xlabel("environment steps learned from (phase 1, replay and compound training; log scale)")
    ax.set_ylabel(f"dev success ({spec['eval_episodes']} seeds per repeat)")
    ax.set_ylim(0, 1)
    ax.set_title(f"{spec['task']}: sub-skills and stitching vs from scratch")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    png = out_dir / "curve.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    md = out_dir / "table.md"
    md.write_text("\n".join(report_lines(results)) + "\n")
    return png, md


def phase1_text(spec: dict[str, Any]) -> str:
    """What phase 1 played, in words."""
    retries = spec.get("retries", 0)
    again = f", unsolved worlds played again up to {retries} more times" if retries else ""
    if subtasks_of(spec["task"]):
        return f"{spec['phase1']} episodes of each sub-task{again}"
    attempts = spec.get("attempts", 1)
    return (
        f"{attempts} attempts on each of {spec['phase1']} train worlds of the task itself (no sub-tasks){again}, "
        "score points of different attempts stitched per world"
    )


def limit_text(spec: dict[str, Any]) -> str:
    limit = spec.get("overrides", {}).get("agent", {}).get("max_steps")
    return f"; step limit {limit} for every arm" if limit else ""


def report_lines(results: dict[str, Any]) -> list[str]:
    """The markdown report: dev points, test fold, step ratios and paired tests (the `skills+sft`
    adapter alone, when recorded, as the arm `sft alone`)."""
    results = with_adapter_alone(results)
    spec, rows = results["spec"], summarise(results)
    lines = [
        f"# {spec['task']}: sub-skill experience and stitching vs a from-scratch learner",
        "",
        f"Phase 1: {phase1_text(spec)}; phase 2: {spec['budget']} compound training episodes; "
        f"DRRN: {spec['drrn_steps']} learning steps; {spec['eval_episodes']} dev seeds per point and repeat, "
        f"{spec['repeats']} repeats{limit_text(spec)}.",
        "",
        "| arm | stage | env steps learned from (mean) | dev success | 95% CI | per repeat |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        per = ", ".join(f"{x:.0%}" for x in r["per_repeat"])
        lines.append(
            f"| {r['arm']} | {r['stage']} | {r['env_steps']:.0f} | {r['successes']}/{r['episodes']} "
            f"({r['success_rate']:.0%}) | {r['ci95'][0]:.0%}-{r['ci95'][1]:.0%} | {per} |"
        )
    tests = test_rows(results)
    if tests:
        lines += [
            "",
            "## Final points on the test fold (memory frozen)",
            "",
            "| arm | test success | 95% CI |",
            "|---|---|---|",
        ]
        for t in tests:
            lines.append(
                f"| {t['arm']} | {t['successes']}/{t['episodes']} ({t['success_rate']:.0%}) | "
                f"{t['ci95'][0]:.0%}-{t['ci95'][1]:.0%} |"
            )
    ratios = [x for x in (step_ratio(rows, a) for a in ("skills", "skills+sft")) if x]
    if ratios:
        lines += [
            "",
            "## Environment steps to reach the from-scratch learner's final success",
            "",
            "| arm | DRRN final | DRRN steps to reach it | arm steps to reach it | ratio | arm final (steps) |",
            "|---|---|---|---|---|---|",
        ]
        for x in ratios:
            got = f"{x['arm_steps']:.0f}" if x["arm_steps"] is not None else "not reached"
            ratio = f"{x['ratio']:.3f}" if x["ratio"] is not None else "-"
            lines.append(
                f"| {x['arm']} | {x['target']:.0%} | {x['baseline_steps']:.0f} | {got} | {ratio} | "
                f"{x['arm_final']:.0%} ({x['arm_final_steps']:.0f}) |"
            )
    pairs = final_pairs(results)
    if pairs:
        lines += [
            "",
            "## Final dev points compared (McNemar's exact test on paired (repeat, seed) outcomes)",
            "",
            "| arm A | arm B | paired seeds | A | B | A only | B only | p |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for p in pairs:
            pv = f"{p['mcnemar_p']:.3g}" if p["mcnemar_p"] is not None else "-"
            lines.append(
                f"| {p['arm_a']} | {p['arm_b']} | {p['pairs']} | {p['a']} | {p['b']} | {p['a_only']} | "
                f"{p['b_only']} | {pv} |"
            )
    return lines
