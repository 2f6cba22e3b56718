"""The studio's runs side: the runs list (`crl runs`), a run's episodes and learning curve, its
live progress read from the episode log, an episode step by step with what memory offered
(`crl show` / `crl explain`), and the experiment results `crl experiment` writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from crl.agent.explain import explain_step
from crl.agent.runs import RunInfo, RunStore, find_run, summarise
from crl.memory.storage.namespaces import run_namespace
from crl.memory.trajectory import Episode
from crl.tasks.evaluation import wilson_interval

from .memory_view import record_link

RESULTS_FILE = "results.json"


def run_row(store: RunStore, info: RunInfo) -> dict[str, Any]:
    """A run as the runs list shows it: task, model/adapter, policy, episodes, success with its 95% interval."""
    s = summarise(store.episodes(info.run_id))
    lo, hi = wilson_interval(s.successes, s.finished)
    agent = (info.settings or {}).get("agent") or {}
    return {
        "run_id": info.run_id,
        "kind": info.kind,
        "task": info.task,
        "model": info.model,
        "adapter": info.adapter,
        "policy": agent.get("policy"),
        "memory": agent.get("memory"),
        "status": info.status,
        "episodes": len(info.seeds),
        "finished": s.finished,
        "successes": s.successes,
        "errored": s.errored,
        "success_rate": s.success_rate,
        "ci95": [lo, hi],
        "created_at": info.created_at,
        "finished_at": info.finished_at,
        "where": store.dir.name,
    }


def runs(stores: list[RunStore]) -> list[dict[str, Any]]:
    """Every run of the data directory, newest first."""
    rows = [run_row(store, info) for store in stores for info in store.list()]
    return sorted(rows, key=lambda r: r["run_id"], reverse=True)


def episode_number(episode: Episode) -> int:
    """An episode's number within its run (`RUN-0003` is 3)."""
    return int(episode.episode_id.rsplit("-", 1)[-1])


def episode_row(e: Episode) -> dict[str, Any]:
    """An episode as a run's table shows it."""
    return {
        "n": episode_number(e),
        "episode_id": e.episode_id,
        "seed": e.seed,
        "status": e.status,
        "finished": e.finished,
        "success": e.success,
        "steps": len(e.steps),
        "return": e.total_return,
        "end_reason": e.end_reason,
        "last_action": e.steps[-1].action if e.steps else None,
    }


def learning_curve(episodes: list[Episode]) -> list[dict[str, Any]]:
    """Success over a run's finished episodes in the order they ended: after each, the running rate
    and its 95% interval (environment errors are left out, as `crl runs` leaves them out)."""
    done = sorted((e for e in episodes if e.finished and e.status != "error"), key=lambda e: e.ended_at or 0.0)
    points, wins = [], 0
    for i, e in enumerate(done, 1):
        wins += bool(e.success)
        lo, hi = wilson_interval(wins, i)
        points.append({"episodes": i, "success": bool(e.success), "rate": wins / i, "ci95": [lo, hi]})
    return points


def run_detail(stores: list[RunStore], run_id: str) -> dict[str, Any]:
    """One run: its row, its episodes and its learning curve.

    Raises:
        FileNotFoundError: no such run.
    """
    store = find_run(stores, run_id)
    info = store.load(run_id)
    episodes = store.episodes(run_id)
    return {
        "run": run_row(store, info),
        "episodes": [episode_row(e) for e in sorted(episodes, key=episode_number)],
        "curve": learning_curve(episodes),
    }


def progress(stores: list[RunStore], run_id: str) -> dict[str, Any]:
    """A run's progress read from its episode log now (the log is flushed every step, so a
    running run's page can poll this): finished and running episodes and their latest step."""
    store = find_run(stores, run_id)
    info = store.load(run_id)
    episodes = store.episodes(run_id)
    s = summarise(episodes)
    return {
        "run_id": run_id,
        "status": info.status,
        "episodes": len(info.seeds),
        "started": len(episodes),
        "finished": s.finished,
        "successes": s.successes,
        "steps": s.steps,
        "running": [episode_row(e) for e in episodes if not e.finished],
        "log_bytes": store.log_path(run_id).stat().st_size if store.log_path(run_id).exists() else 0,
    }


def episode_detail(stores: list[RunStore], run_id: str, number: int, default_namespace: str = "") -> dict[str, Any]:
    """An episode step by step with `crl explain`'s data for each step, every memory id a link
    (into the namespace the run learned from, when it is not `default_namespace`).

    Raises:
        FileNotFoundError: no such run.
        LookupError: the run has no such episode.
    """
    store = find_run(stores, run_id)
    wanted = f"{run_id}-{number:04d}"
    found = [e for e in store.episodes(run_id) if e.episode_id == wanted]
    if not found:
        raise LookupError(f"run {run_id} has no episode {number}")
    ep = found[0]
    recorded = run_namespace(store.dir, run_id)
    ns = recorded if recorded and recorded != default_namespace else None
    steps = []
    for step in ep.steps:
        e = explain_step(step)
        in_prompt = set((e["prompt"] or {}).get("memory_keys") or [])
        for m in e["memories"]:
            m["link"] = record_link(str(m.get("id", "")), ns)
            m["in_prompt"] = m.get("id") in in_prompt
        e["thought"] = step.thought
        e["reason"] = (e["policy"] or {}).get("reason") or ""
        if e["loop_break"]:
            e["reason"] = f"loop breaker replaced {e['loop_break'].get('replaced')!r}"
        steps.append(e)
    return {
        "run_id": run_id,
        "number": number,
        "episode": episode_row(ep) | {"task": ep.task, "goal": ep.goal, "model": ep.model, "adapter": ep.adapter},
        "memory_link": record_link(f"ep:{ep.family}:{ep.episode_id}", ns),
        "namespace": recorded,
        "steps": steps,
    }


# ---- experiments ------------------------------------------------------------------------


def experiment_folders(roots: list[Path]) -> dict[str, Path]:
    """Every folder under `roots` that holds a `results.json`, by a name relative to its root."""
    found: dict[str, Path] = {}
    for root in roots:
        if not root.is_dir():
            continue
        for path in sorted(root.rglob(RESULTS_FILE)):
            name = path.parent.relative_to(root).as_posix()
            found.setdefault(name if name != "." else root.name, path.parent)
    return found


def experiment(roots: list[Path], name: str) -> dict[str, Any]:
    """One experiment's learning curves per arm (`crl experiment`'s pooled summary with 95% intervals).

    Raises:
        LookupError: no results folder of that name.
        ValueError: its results.json is not a learning-curve file.
    """
    from crl.agent.experiment import compare_arms, summarise

    folders = experiment_folders(roots)
    if name not in folders:
        raise LookupError(f"no experiment {name!r} under {', '.join(map(str, roots))}")
    results = json.loads((folders[name] / RESULTS_FILE).read_text())
    if not isinstance(results, dict) or "runs" not in results or "spec" not in results:
        raise ValueError(f"{folders[name] / RESULTS_FILE} is not a `crl experiment` results file")
    try:
        rows = summarise(results)
        pairs = compare_arms(results)
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(
            f"{folders[name] / RESULTS_FILE} is not a `crl experiment curve` results file ({exc})"
        ) from None
    arms: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        arms.setdefault(r["arm"], []).append(
            {
                "train_episodes": r["train_episodes"],
                "success_rate": r["success_rate"],
                "ci95": r["ci95"],
                "repeats": r["repeats"],
            }
        )
    return {"name": name, "path": str(folders[name]), "spec": results["spec"], "arms": arms, "pairs": pairs}


MAX_COMPARED = 8


def compare(stores: list[RunStore], run_ids: list[str], all_pairs: bool = False) -> dict[str, Any]:
    """Runs of this data directory played on the same seeds, compared seed by seed (`crl compare`):
    each run's success with its 95% interval and mean points, and exact McNemar tests of each later
    run against the first (every pair with `all_pairs`).

    Raises:
        ValueError: fewer than two runs, more than `MAX_COMPARED`, one named twice, or runs of
            different tasks.
        FileNotFoundError: no such run.
    """
    from crl.agent.run_compare import compare_runs, stored_run_outcomes

    ids = [r.strip() for r in run_ids if r.strip()]
    if len(ids) < 2:
        raise ValueError("compare needs at least two runs: tick two or more on the runs page")
    if len(ids) > MAX_COMPARED:
        raise ValueError(f"compare takes at most {MAX_COMPARED} runs, got {len(ids)}")
    if len(set(ids)) < len(ids):
        raise ValueError(f"a run is named twice ({', '.join(ids)})")
    runs = [stored_run_outcomes(find_run(stores, run_id), run_id) for run_id in ids]
    return compare_runs(runs, all_pairs=all_pairs)
