"""Learning curves: how much experience reuse helps, arm by arm.

For each arm and repeat: a fresh data directory (fresh memory), train-fold episodes in order
(each repeat its own train seeds, and `llm.seed` = the repeat number, which seeds sampling
and the random arm), and after every `eval_every` of them an evaluation on a fixed dev set. Results are written
after every evaluation point, so an interrupted experiment resumes where it stopped.

Arms are settings overrides, the same knobs as `crl run`:

- `none`: no memory at all (the model alone); `random`: a random admissible action;
- `memory`: memory in prompts (`--memory full --policy llm --no-reflect`);
- `memory+rules`: the same, with the reflector distilling rules every `reflect.every` episodes;
- `mixed`, `mixed+rules`: memory in prompts and episodic control (`--policy mixed`);
- `episodic`: episodic control alone (`--policy memory`);
- `scored`: the model alone, acting by scoring the listed actions (`--policy posterior`, no memory);
- `posterior`: the same model prior combined with memory's advantages (`--policy posterior`).

Arms that keep no memory cannot change between evaluation points: they are evaluated once
and that figure stands for every point (their train episodes would be wasted compute). The
`none` arm with greedy decoding is also identical across repeats, so it runs one repeat, and
the start point of `memory` and `memory+rules` (empty memory, the model alone) is `none`'s;
that of `mixed+rules` is `mixed`'s in the same repeat (no rule exists before training).

Every evaluation point keeps the outcome of each dev seed, and every arm and repeat plays
the same dev seeds, so two arms are compared on paired outcomes: `compare_arms` gives
McNemar's exact test on the (repeat, seed) pairs beside Fisher's exact test on the pooled
rates, and `table.md` (`crl experiment report`) prints both.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from crl.agent.config import Settings, load_settings
from crl.agent.llm.base import ChatModel
from crl.tasks.evaluation import discordant, fisher_p, mcnemar_p, wilson_interval

ARMS: dict[str, dict[str, Any]] = {
    "none": {"agent": {"memory": "off", "policy": "llm"}, "memory": {"enabled": False}},
    "random": {"agent": {"policy": "random"}, "memory": {"enabled": False}},
    "memory": {"agent": {"memory": "full", "policy": "llm"}, "reflect": {"enabled": False}},
    "memory+rules": {"agent": {"memory": "full", "policy": "llm"}, "reflect": {"enabled": True}},
    "mixed": {"agent": {"memory": "full", "policy": "mixed"}, "reflect": {"enabled": False}},
    "mixed+rules": {"agent": {"memory": "full", "policy": "mixed"}, "reflect": {"enabled": True}},
    "episodic": {"agent": {"memory": "off", "policy": "memory"}, "reflect": {"enabled": False}},
    "scored": {"agent": {"memory": "off", "policy": "posterior"}, "memory": {"enabled": False}},
    "posterior": {"agent": {"memory": "off", "policy": "posterior"}, "reflect": {"enabled": False}},
}


@dataclass
class CurvePoint:
    """One evaluation: after `train_episodes` (and `train_steps` environment steps) of training."""

    train_episodes: int
    train_steps: int
    successes: int
    episodes: int
    mean_steps: float
    prompt_tokens_per_call: float | None = None
    retrieval_ms_per_step: float | None = None
    decided_by: dict[str, int] = field(default_factory=dict)
    mean_score: float | None = None
    outcomes: dict[str, bool] = field(default_factory=dict)  # dev seed (as text: a JSON key) -> success

    @property
    def rate(self) -> float:
        return self.successes / self.episodes if self.episodes else 0.0


@dataclass
class ArmRun:
    """One repeat of one arm."""

    arm: str
    repeat: int
    points: list[CurvePoint] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class CurveSpec:
    """What an experiment measures."""

    task: str
    arms: list[str]
    budget: int
    eval_every: int
    eval_episodes: int
    repeats: int
    overrides: dict[str, Any] = field(default_factory=dict)


def arm_settings(base: dict[str, Any], arm: str, home: Path) -> Settings:
    """The settings of `arm`, on top of the experiment's common overrides."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; arms: {', '.join(ARMS)}")
    layers: dict[str, Any] = json.loads(json.dumps(base))
    for section, values in ARMS[arm].items():
        layers.setdefault(section, {}).update(values)
    layers["home"] = str(home)
    return load_settings(layers)


def deterministic(arm: str, overrides: dict[str, Any]) -> bool:
    """An arm whose repeats would be identical: no memory and greedy decoding on the same dev
    seeds. It runs once, and is reported with one repeat (not counted three times)."""
    greedy = float(overrides.get("llm", {}).get("temperature", 0.0)) == 0.0
    sampled = overrides.get("agent", {}).get("posterior", {}).get("mode") == "sample"
    return (arm == "none" and greedy) or (arm == "scored" and not sampled)


def starts_as_none(arm: str, overrides: dict[str, Any]) -> bool:
    """Whether the arm's first evaluation (empty memory, no rules yet) is the `none` arm's: the
    model alone decides (policy llm), an empty memory adds nothing to the prompt, and greedy
    decoding on the same dev seeds repeats itself. Its start point is then copied from `none`
    instead of being played again."""
    return ARMS[arm]["agent"].get("policy") == "llm" and arm != "none" and deterministic("none", overrides)


def twin_start(arm: str, rep: int, overrides: dict[str, Any], done: dict[tuple[str, int], ArmRun]) -> CurvePoint | None:
    """The first evaluation this arm would repeat, when one was already played: an `X+rules`
    arm starts as `X` in the same repeat (no rule exists before training; greedy decoding),
    an llm-policy memory arm as `none` (see `starts_as_none`)."""
    base = arm.removesuffix("+rules")
    greedy = deterministic("none", overrides)
    twin = done.get((base, rep)) if base != arm and base in ARMS and greedy else None
    if twin is None and starts_as_none(arm, overrides):
        twin = done.get(("none", 0))
    if twin is None and arm == "posterior" and deterministic("scored", overrides):
        twin = done.get(("scored", 0))  # empty memory: the posterior is the model's own prior
    return twin.points[0] if twin is not None and twin.points else None


def learns(arm: str) -> bool:
    """Whether an arm can change between evaluation points."""
    return ARMS[arm].get("memory", {}).get("enabled", True)


def load_results(path: Path) -> dict[str, Any]:
    """A results file as written by `run_curve`."""
    return json.loads(Path(path).read_text())


def _save(path: Path, spec: CurveSpec, runs: list[ArmRun]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"spec": asdict(spec), "runs": [asdict(r) for r in runs]}, indent=1))
    tmp.replace(path)


def run_curve(
    spec: CurveSpec,
    out_dir: Path,
    model: ChatModel,
    on_point: Callable[[ArmRun, CurvePoint], None] | None = None,
) -> dict[str, Any]:
    """Run (or resume) the experiment; returns the results written to `out_dir/results.json`."""
    from crl.agent.app import start_run

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "results.json"
    runs: list[ArmRun] = []
    if path.exists():
        old = load_results(path)
        if old["spec"] != asdict(spec):
            raise ValueError(f"{path} holds a different experiment; choose another --out")
        runs = [
            ArmRun(r["arm"], r["repeat"], [CurvePoint(**p) for p in r["points"]], r["seconds"]) for r in old["runs"]
        ]
    done = {(r.arm, r.repeat): r for r in runs}
    checkpoints = list(range(0, spec.budget + 1, spec.eval_every))
    for arm in spec.arms:
        for rep in range(spec.repeats):
            if rep and deterministic(arm, spec.overrides):
                break
            run = done.get((arm, rep)) or ArmRun(arm, rep)
            if (arm, rep) not in done:
                runs.append(run)
                done[(arm, rep)] = run
            home = out_dir / arm / f"repeat-{rep}"
            settings = arm_settings(spec.overrides, arm, home)
            settings.llm.seed = rep
            trained = run.points[-1].train_episodes if run.points else 0
            steps = run.points[-1].train_steps if run.points else 0
            for point in checkpoints[len(run.points) :]:
                t0 = time.monotonic()
                if point > trained and learns(arm):
                    result = start_run(
                        settings, spec.task, point - trained, seed_start=rep * spec.budget + trained, model=model
                    )
                    steps += sum(len(e.steps) for e in result.episodes)
                trained = point
                if run.points and not learns(arm):
                    first = run.points[0]
                    evaluated = replace(first, train_episodes=point, train_steps=steps)
                elif point == 0 and (first := twin_start(arm, rep, spec.overrides, done)) is not None:
                    evaluated = replace(first, train_episodes=0, train_steps=0)
                else:
                    ev = start_run(settings, spec.task, spec.eval_episodes, fold="dev", kind="eval", model=model)
                    r = ev.report()
                    evaluated = CurvePoint(
                        point,
                        steps,
                        r["successes"],
                        r["episodes"],
                        r["mean_steps"],
                        round(r["prompt_tokens_per_call"], 1),
                        round(r["retrieval_ms_per_step"], 2),
                        r["decided_by"],
                        r["mean_score"],
                        seed_outcomes(ev.episodes),
                    )
                run.points.append(evaluated)
                run.seconds += time.monotonic() - t0
                _save(path, spec, runs)
                if on_point is not None:
                    on_point(run, evaluated)
    results = load_results(path)
    write_report(results, out_dir)
    return results


def seed_outcomes(episodes: list[Any]) -> dict[str, bool]:
    """Success of each finished episode, by its seed (as text, a JSON object key)."""
    return {str(e.seed): bool(e.success) for e in episodes if e.finished}


def _paired(a: list[dict], b: list[dict], i: int) -> tuple[list[bool], list[bool]]:
    """Outcomes of the (repeat, seed) pairs two arms both played at point `i`.

    An arm run once (deterministic, see `deterministic`) stands for every repeat.
    """
    out_a: list[bool] = []
    out_b: list[bool] = []
    for repeat in sorted({r["repeat"] for r in a} | {r["repeat"] for r in b}):
        run, other = _of_repeat(a, repeat), _of_repeat(b, repeat)
        if run is None or other is None or len(run["points"]) <= i or len(other["points"]) <= i:
            continue
        mine, theirs = run["points"][i].get("outcomes") or {}, other["points"][i].get("outcomes") or {}
        for seed in sorted(set(mine) & set(theirs), key=lambda s: (len(s), s)):
            out_a.append(bool(mine[seed]))
            out_b.append(bool(theirs[seed]))
    return out_a, out_b


def _of_repeat(runs: list[dict], repeat: int) -> dict | None:
    for run in runs:
        if run["repeat"] == repeat:
            return run
    return runs[0] if len(runs) == 1 else None


def compare_arms(results: dict[str, Any], point: int = -1) -> list[dict[str, Any]]:
    """Each pair of arms at one evaluation point: Fisher's exact test on the pooled rates and
    McNemar's exact test on the (repeat, dev seed) pairs both played (two-sided p-values).

    Args:
        results: as written by `run_curve`.
        point: index of the evaluation point (default: the last one every arm reached).

    Returns:
        One row per pair of arms, in the order the arms first appear: `arm_a`, `arm_b`,
        `train_episodes`, `a` and `b` as [successes, episodes], `fisher_p`, `pairs`,
        `a_only` and `b_only` (discordant pairs), `mcnemar_p` (None without per-seed outcomes,
        as in results written before they were recorded).
    """
    by_arm: dict[str, list[dict]] = {}
    for r in results["runs"]:
        by_arm.setdefault(r["arm"], []).append(r)
    if not by_arm:
        return []
    n_points = min(len(r["points"]) for reps in by_arm.values() for r in reps)
    if n_points == 0:
        return []
    i = point if point >= 0 else n_points + point
    arms = list(by_arm)
    rows = []
    for x, arm_a in enumerate(arms):
        for arm_b in arms[x + 1 :]:
            a, b = by_arm[arm_a], by_arm[arm_b]
            sa, na = sum(r["points"][i]["successes"] for r in a), sum(r["points"][i]["episodes"] for r in a)
            sb, nb = sum(r["points"][i]["successes"] for r in b), sum(r["points"][i]["episodes"] for r in b)
            pa, pb = _paired(a, b, i)
            a_only, b_only = discordant(pa, pb)
            rows.append(
                {
                    "arm_a": arm_a,
                    "arm_b": arm_b,
                    "train_episodes": a[0]["points"][i]["train_episodes"],
                    "a": [sa, na],
                    "b": [sb, nb],
                    "fisher_p": fisher_p(sa, na, sb, nb),
                    "pairs": len(pa),
                    "a_only": a_only,
                    "b_only": b_only,
                    "mcnemar_p": mcnemar_p(pa, pb) if pa else None,
                }
            )
    return rows


def pooled_points(results: dict[str, Any]) -> Iterator[tuple[str, list[dict], int, int, tuple[float, float]]]:
    """Per arm and evaluation point (up to the fewest any repeat reached): the repeats' points,
    their pooled successes and episodes, and its 95% Wilson interval."""
    by_arm: dict[str, list[dict]] = {}
    for r in results["runs"]:
        by_arm.setdefault(r["arm"], []).append(r)
    for arm, reps in by_arm.items():
        for i in range(min(len(r["points"]) for r in reps)):
            pts = [r["points"][i] for r in reps]
            s, n = sum(p["successes"] for p in pts), sum(p["episodes"] for p in pts)
            yield arm, pts, s, n, wilson_interval(s, n)


def summarise(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per arm and evaluation point: pooled success over repeats with a 95% interval."""
    rows = []
    for arm, pts, s, n, (lo, hi) in pooled_points(results):
        rows.append(
            {
                "arm": arm,
                "train_episodes": pts[0]["train_episodes"],
                "train_steps": sum(p["train_steps"] for p in pts) / len(pts),
                "success_rate": s / n if n else 0.0,
                "ci95": [lo, hi],
                "per_repeat": [p["successes"] / p["episodes"] if p["episodes"] else 0.0 for p in pts],
                "repeats": len(pts),
                "prompt_tokens_per_call": _mean(p.get("prompt_tokens_per_call") for p in pts),
                "retrieval_ms_per_step": _mean(p.get("retrieval_ms_per_step") for p in pts),
                "decided_by": _shares(p.get("decided_by") or {} for p in pts),
                "mean_score": _mean(p.get("mean_score") for p in pts),
            }
        )
    return rows


def _mean(values) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _shares(counts) -> dict[str, float]:
    total: dict[str, int] = {}
    for c in counts:
        for who, n in c.items():
            total[who] = total.get(who, 0) + n
    n = sum(total.values())
    return {who: k / n for who, k in sorted(total.items())} if n else {}


def write_report(results: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """Write `curve.png` (success vs training episodes, mean with a band over repeats) and
    `table.md`; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summarise(results)
    spec = results["spec"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for arm in dict.fromkeys(r["arm"] for r in rows):
        pts = [r for r in rows if r["arm"] == arm]
        x = [p["train_episodes"] for p in pts]
        y = [p["success_rate"] for p in pts]
        ax.plot(x, y, marker="o", label=arm)
        ax.fill_between(x, [p["ci95"][0] for p in pts], [p["ci95"][1] for p in pts], alpha=0.15)
    ax.set_xlabel("training episodes (train fold)")
    ax.set_ylabel(f"dev success rate ({spec['eval_episodes']} episodes per point and repeat)")
    ax.set_ylim(0, 1)
    ax.set_title(spec["task"])
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    png = out_dir / "curve.png"
    fig.savefig(png, dpi=110)
    plt.close(fig)
    lines = [
        f"# {spec['task']}: dev success vs training episodes",
        "",
        "| arm | after N train episodes | mean train steps | dev success | 95% CI | per repeat "
        "| mean final score | prompt tokens per call | retrieval ms per step | who chose the action |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        per = ", ".join(f"{x:.0%}" for x in r["per_repeat"])
        tokens = f"{r['prompt_tokens_per_call']:.0f}" if r.get("prompt_tokens_per_call") else "-"
        ms = f"{r['retrieval_ms_per_step']:.1f}" if r.get("retrieval_ms_per_step") else "-"
        who = ", ".join(f"{k} {v:.0%}" for k, v in (r.get("decided_by") or {}).items()) or "-"
        score = f"{r['mean_score']:.2f}" if r.get("mean_score") is not None else "-"
        lines.append(
            f"| {r['arm']} | {r['train_episodes']} | {r['train_steps']:.0f} | {r['success_rate']:.1%} | "
            f"{r['ci95'][0]:.1%}-{r['ci95'][1]:.1%} | {per} | {score} | {tokens} | {ms} | {who} |"
        )
    lines += _comparison_lines(compare_arms(results))
    md = out_dir / "table.md"
    md.write_text("\n".join(lines) + "\n")
    return png, md


def _comparison_lines(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        f"## Tests between arms after {rows[0]['train_episodes']} train episodes (two-sided p-values)",
        "",
        "McNemar: exact binomial on the (repeat, dev seed) pairs where the arms disagree; "
        "Fisher: exact test on the pooled rates.",
        "",
        "| arm A | arm B | A | B | paired seeds | A only | B only | McNemar p | Fisher p |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mcnemar = f"{r['mcnemar_p']:.3g}" if r["mcnemar_p"] is not None else "-"
        lines.append(
            f"| {r['arm_a']} | {r['arm_b']} | {r['a'][0]}/{r['a'][1]} | {r['b'][0]}/{r['b'][1]} | {r['pairs']} | "
            f"{r['a_only']} | {r['b_only']} | {mcnemar} | {r['fisher_p']:.3g} |"
        )
    return lines
