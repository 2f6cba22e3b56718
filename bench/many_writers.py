"""Many writers on one Chroma server: W `crl run` processes at once, then an audit of what the server holds.

    python -m bench.many_writers [--writers 4] [--episodes 8] [--max-steps 6] [--embedding hashing] [--json]

Starts a real `chroma run` server and an OpenAI-compatible server over the scripted model, then
W `crl run keyroom/key` processes on one data directory and that server, each with memory in
its prompts (`--policy llm --memory cases`): every episode retrieves from the shared bank, is
stored at its end, and credits the memories its prompts used (a use count, a utility and an EMA
value step per record: read-modify-write updates, serialised by the journal lock and applied in
journal order). Then it audits:

    lost episodes   episodes (or steps) in the run logs that the server does not hold
    lost updates    credit increments in the journal missing from the records' use counts
    rebuild         `crl memory rebuild` replays the logs and the journal into a fresh view:
                    the same record ids with the same values, utilities and use counts, exactly

and prints writers, episodes, wall seconds, episodes/s (all writers together, process start
included) and the three figures. `--embedding minilm` uses the bundled MiniLM model in every
writer (slower; the default hashing embedding measures the store, not the embedder).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from crl.memory.storage.episode_log import read_episodes

KINDS = ("episode", "step", "rule")


def crl_env(home: Path, embedding: str) -> dict[str, str]:
    """The environment of one writer: its data directory and embedding model."""
    env = dict(os.environ, CRL_HOME=str(home), OPENAI_API_KEY="not-needed", CRL_THREADS="1")
    if embedding != "minilm":
        env["CRL_MEMORY__EMBEDDING_MODEL"] = embedding
    return env


def start_writers(
    home: Path, model_url: str, memory_url: str, writers: int, episodes: int, max_steps: int, embedding: str
) -> list[tuple[subprocess.Popen, Path]]:
    """Start `writers` `crl run` processes on one home and server; their output goes to files in `home`."""
    out_dir = home.parent / "writers"
    out_dir.mkdir(parents=True, exist_ok=True)
    procs = []
    for w in range(writers):
        cmd = [sys.executable, "-m", "crl", "run", "keyroom/key", "--backend", "openai", "--base-url", model_url]
        cmd += ["--model", "scripted", "--policy", "llm", "--memory", "cases", "--memory-url", memory_url]
        cmd += ["-n", str(episodes), "--seed", str(w * episodes), "-k", "1", "--max-steps", str(max_steps)]
        cmd += ["--no-reflect", "--json"]
        log = out_dir / f"writer{w}.txt"
        with open(log, "w") as f:
            procs.append((subprocess.Popen(cmd, env=crl_env(home, embedding), stdout=f, stderr=subprocess.STDOUT), log))
    return procs


def snapshot(bank) -> dict[str, tuple]:
    """Record id -> (value, utility, use count, use successes, tier) of every record the view holds."""
    return {r.id: (r.value, r.utility, r.use_count, r.use_successes, r.tier) for k in KINDS for r in bank.ls(kind=k)}


def logged_episodes(home: Path) -> dict[str, int]:
    """Episode id -> steps logged, over every run log of the home."""
    out: dict[str, int] = {}
    for log in (home / "runs").glob("*/episodes.jsonl"):
        for ep in read_episodes(log):
            out[ep.episode_id] = len(ep.steps)
    return out


def audit(home: Path, memory_url: str, embedding: str) -> dict[str, Any]:
    """Lost episodes, lost credit updates, and whether `crl memory rebuild` reproduces the server's view."""
    from crl.agent.app import open_bank
    from crl.agent.config import load_settings

    overrides: dict[str, Any] = {"home": str(home), "memory": {"url": memory_url}}
    if embedding != "minilm":
        overrides["memory"]["embedding_model"] = embedding
    settings = load_settings(overrides)
    logged = logged_episodes(home)
    with open_bank(settings) as bank:
        stored = {r.episode_id: r.length for r in bank.ls()}
        before = snapshot(bank)
        increments: Counter[str] = Counter()
        for entry in bank.state.entries:
            if entry.op == "credit":
                increments.update(entry.ids)
    lost_episodes = sum(1 for eid, n in logged.items() if stored.get(eid, -1) < n)
    lost_updates = sum(max(0, n - before[rid][2]) for rid, n in increments.items() if rid in before)
    extra_updates = sum(max(0, before[rid][2] - n) for rid, n in increments.items() if rid in before)
    miscounted = [
        {"id": rid, "use_count": before[rid][2], "journalled": n}
        for rid, n in sorted(increments.items())
        if rid in before and before[rid][2] != n
    ]
    rebuilt = subprocess.run(
        [sys.executable, "-m", "crl", "memory", "rebuild", "--yes", "--memory-url", memory_url, "--json"],
        env=crl_env(home, embedding),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if rebuilt.returncode != 0:
        raise RuntimeError(f"crl memory rebuild failed: {rebuilt.stderr[-2000:]}")
    with open_bank(settings) as bank:
        after = snapshot(bank)
    differ = sorted(rid for rid in set(before) | set(after) if before.get(rid) != after.get(rid))
    return {
        "logged_episodes": len(logged),
        "stored_episodes": len(stored),
        "lost_episodes": lost_episodes,
        "credit_increments": sum(increments.values()),
        "lost_updates": lost_updates,
        "extra_updates": extra_updates,
        "miscounted": miscounted[:10],
        "records": len(before),
        "rebuild_identical": not differ,
        "rebuild_differences": differ[:10],
    }


def writer_notices(logs: list[Path], limit: int = 10) -> list[str]:
    """The lines the writers printed besides their JSON results (warnings: an outage, a skipped entry)."""
    seen: dict[str, None] = {}
    for log in logs:
        for line in log.read_text(errors="replace").splitlines():
            text = line.strip()
            if text == "{":
                break  # the JSON result
            if text and "tiktoken" not in text and "━" not in text:
                seen.setdefault(f"{log.stem}: {text[:300]}", None)
    return list(seen)[:limit]


def run_bench(writers: int, episodes: int, max_steps: int, embedding: str, root: Path) -> dict[str, Any]:
    """Start the servers, run the writers, audit; returns the figures."""
    from crl.agent.llm.scripted import ScriptedModel
    from tests.chroma_server import ChromaServer
    from tests.openai_test_server import serve_chat_model

    home = root / ".crl"
    server = ChromaServer(root / "chroma").start()
    model_server, model_url = serve_chat_model(ScriptedModel(lambda messages: "Thought: look around.\nAction: look"))
    try:
        t0 = time.monotonic()
        procs = start_writers(home, model_url, server.url, writers, episodes, max_steps, embedding)
        failed = []
        for proc, log in procs:
            if proc.wait(timeout=1800) != 0:
                failed.append(f"{log.name}: {log.read_text()[-1500:]}")
        wall = time.monotonic() - t0
        if failed:
            raise RuntimeError("a writer failed:\n" + "\n".join(failed))
        figures = audit(home, server.url, embedding)
        figures["writer_notices"] = writer_notices([log for _, log in procs])
    finally:
        model_server.stop()
        server.stop()
    return {
        "writers": writers,
        "episodes": writers * episodes,
        "max_steps": max_steps,
        "embedding": embedding,
        "wall_s": round(wall, 1),
        "episodes_per_s": round(writers * episodes / wall, 2),
        **figures,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writers", type=int, default=4, help="crl run processes at once")
    ap.add_argument("--episodes", type=int, default=8, help="episodes per writer")
    ap.add_argument("--max-steps", type=int, default=6, help="step limit of each episode")
    ap.add_argument("--embedding", default="hashing", help="hashing (default), hashing:DIM, or minilm")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="crl-writers-"))
    try:
        result = run_bench(args.writers, args.episodes, args.max_steps, args.embedding, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"writers {result['writers']}  episodes {result['episodes']}  wall {result['wall_s']} s  "
        f"episodes/s {result['episodes_per_s']}  lost episodes {result['lost_episodes']}  "
        f"lost updates {result['lost_updates']} (of {result['credit_increments']} credit increments)  "
        f"rebuild identical {result['rebuild_identical']} ({result['records']} records)"
    )


if __name__ == "__main__":
    main()
