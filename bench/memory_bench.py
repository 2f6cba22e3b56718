"""Experience-bank benchmark: ingest rate, query latency and recall, our layout vs a Chroma `where`.

    python -m bench.memory_bench [--sizes 10000,100000] [--quick] [--queries 200] [--json FILE]

Parts, each printed as it finishes:
  1. query embedding: the bundled all-MiniLM-L6-v2, one state text per call (p50/p99), and a
     batch's throughput;
  2. ingest: real keyroom episodes (random-ish play) through `ExperienceBank.ingest_episode`,
     steps/s including embedding with MiniLM, and with the hashing fake (store cost alone);
  3. scale: N step records (N from --sizes) in 4 task families, 30% successes, with
     precomputed clustered random unit vectors (embedding 100k texts with MiniLM takes too
     long on 2 shared cores), loaded into (a) the bank's layout (a collection per family and
     outcome bucket) and (b) one flat collection. Per single query, k=10: the retriever's
     real query (family + outcome) and a family-only query on the bank's layout, an
     unfiltered query and a `where` query (family + outcome) on the flat collection (raw Chroma
    calls, ids only; the bank rows include parsing the hit records), and exact
     numpy search on the same vectors; recall@10 of each against exact search on the same
     candidate set; filtered/unfiltered latency ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # numpy/torch threads fight each other on 2 shared cores

import numpy as np  # noqa: E402

from crl.memory.bank import ExperienceBank  # noqa: E402
from crl.memory.config import MemoryConfig  # noqa: E402
from crl.memory.storage.embeddings import HashingEmbedding, SentenceTransformerEmbedding  # noqa: E402
from crl.memory.records import StepRecord, step_record_id  # noqa: E402
from crl.memory.trajectory import Episode, Step  # noqa: E402

FAMILIES = ("keyroom", "gridnav", "textcraft", "webshop")
DIM = 384


def percentiles(samples_s: list[float]) -> tuple[float, float]:
    """(p50, p99) in milliseconds."""
    a = np.asarray(samples_s) * 1000
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


def play_keyroom(n: int, seed0: int = 0, max_steps: int = 12) -> list[Episode]:
    """Keyroom episodes played by a policy that follows the solver 70% of the time."""
    from crl.tasks.keyroom import KeyroomEnv, solve

    rng = random.Random(seed0)
    episodes = []
    for i in range(n):
        variant = rng.choice(["key", "door", "chest", "compound"])
        env = KeyroomEnv(variant)
        obs = env.reset(seed0 + i)
        ep = Episode(episode_id=f"bench-{i:05d}", run_id="bench", task=f"keyroom/{variant}", seed=seed0 + i, goal=obs.goal)
        for t in range(max_steps):
            plan = solve(env)
            action = plan[0] if plan and rng.random() < 0.7 else rng.choice(obs.admissible_actions or ["look"])
            nxt, reward, done, info = env.step(action)
            ep.steps.append(Step(index=t, observation=obs.text, action=action, reward=reward, done=done, info=info))
            obs = nxt
            if done:
                break
        ep.status = "done" if ep.steps[-1].done else "truncated"
        ep.success = bool(ep.steps[-1].done)
        ep.total_return = sum(s.reward for s in ep.steps)
        ep.ended_at = time.time()
        episodes.append(ep)
    return episodes


def bench_embedding(embedder: SentenceTransformerEmbedding, texts: list[str], runs: int) -> dict:
    t = time.perf_counter()
    embedder.embed(texts[:2])
    load_s = time.perf_counter() - t
    single = []
    for i in range(runs):
        t = time.perf_counter()
        embedder.embed([texts[i % len(texts)]])
        single.append(time.perf_counter() - t)
    t = time.perf_counter()
    embedder.embed(texts)
    batch_s = time.perf_counter() - t
    p50, p99 = percentiles(single)
    return {"load_s": load_s, "single_p50_ms": p50, "single_p99_ms": p99, "batch_texts_per_s": len(texts) / batch_s}


def bench_ingest(episodes: list[Episode], embedder, label: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        bank = ExperienceBank(Path(tmp) / "memory", None, MemoryConfig(fsync_journal=True), embedder=embedder)
        per_episode = []
        t0 = time.perf_counter()
        for ep in episodes:
            t = time.perf_counter()
            bank.ingest_episode(ep)
            per_episode.append(time.perf_counter() - t)
        total = time.perf_counter() - t0
        bank.close()
    steps = sum(len(e.steps) for e in episodes)
    p50, p99 = percentiles(per_episode)
    return {
        "embedder": label,
        "episodes": len(episodes),
        "steps": steps,
        "steps_per_s": steps / total,
        "episode_p50_ms": p50,
        "episode_p99_ms": p99,
    }


def clustered_vectors(n: int, rng: np.random.Generator, clusters: int = 500, noise: float = 0.35) -> np.ndarray:
    """Unit vectors around random centres: closer to text embeddings than uniform noise."""
    centres = rng.standard_normal((clusters, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    x = centres[rng.integers(0, clusters, n)] + noise * rng.standard_normal((n, DIM)).astype(np.float32) / np.sqrt(DIM) * 4
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def synthetic_steps(n: int, rng: np.random.Generator) -> tuple[list[StepRecord], np.ndarray, np.ndarray]:
    """n step records spread over FAMILIES, 30% from successful episodes."""
    fam = rng.integers(0, len(FAMILIES), n)
    success = rng.random(n) < 0.3
    now = time.time()
    records = []
    for i in range(n):
        family = FAMILIES[fam[i]]
        episode_id = f"e{i // 10:06d}"
        records.append(StepRecord(
            id=step_record_id(family, episode_id, i % 10), episode_id=episode_id, run_id="bench", task=f"{family}/x",
            family=family, variant="x", seed=0, index=i % 10, goal="Reach the goal.", observation=f"state {i}",
            action="go north", episode_outcome="success" if success[i] else "failure", episode_return=float(success[i]),
            novelty=0.5, value=0.5, created_at=now, updated_at=now,
        ))
    return records, fam, success


class FixedDim(HashingEmbedding):
    """A stand-in embedder for the scale part (vectors are given; only the identity is used)."""

    @property
    def identity(self) -> str:
        return f"bench-random:{DIM}"

    def embed(self, texts):
        raise RuntimeError("the scale benchmark passes precomputed vectors")


def exact_topk(matrix: np.ndarray, ids: np.ndarray, q: np.ndarray, k: int) -> set:
    sims = matrix @ q
    top = np.argpartition(-sims, min(k, len(sims) - 1))[:k]
    return set(ids[top].tolist())


def time_calls(fn, queries: np.ndarray) -> tuple[list[float], list]:
    times, results = [], []
    for q in queries:
        t = time.perf_counter()
        results.append(fn(q))
        times.append(time.perf_counter() - t)
    return times, results


def bench_scale(n: int, n_queries: int, seed: int) -> dict:
    import chromadb
    from chromadb.config import Settings

    rng = np.random.default_rng(seed)
    vectors = clustered_vectors(n, rng)
    records, fam, success = synthetic_steps(n, rng)
    ids = np.array([r.id for r in records])
    out: dict = {"records": n}
    with tempfile.TemporaryDirectory() as tmp:
        bank = ExperienceBank(Path(tmp) / "memory", None, MemoryConfig(fsync_journal=False), embedder=FixedDim(DIM))
        t = time.perf_counter()
        for start in range(0, n, 5000):
            bank.view.put(records[start : start + 5000], vectors[start : start + 5000], None)
        out["bank_load_records_per_s"] = n / (time.perf_counter() - t)

        client = chromadb.PersistentClient(str(Path(tmp) / "flat"), settings=Settings(anonymized_telemetry=False))
        flat = client.create_collection("flat", configuration={"hnsw": bank.view.hnsw}, embedding_function=None)
        t = time.perf_counter()
        for start in range(0, n, 5000):
            sl = slice(start, start + 5000)
            flat.add(
                ids=ids[sl].tolist(),
                embeddings=vectors[sl],
                metadatas=[{"family": FAMILIES[f], "outcome": "success" if s else "failure"} for f, s in zip(fam[sl], success[sl])],
            )
        out["flat_load_records_per_s"] = n / (time.perf_counter() - t)

        kr = fam == 0
        kr_ok = kr & success
        picks = rng.choice(np.flatnonzero(kr), n_queries)
        noise = rng.standard_normal((n_queries, DIM)).astype(np.float32) * 0.02
        queries = vectors[picks] + noise
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
        for q in queries[:5]:  # warm caches and load indexes
            bank.query_steps("keyroom", embeddings=q[None], k=10, where_outcome="success")
            flat.query(query_embeddings=q[None], n_results=10)
            flat.query(query_embeddings=q[None], n_results=10, where={"$and": [{"family": "keyroom"}, {"outcome": "success"}]})

        where = {"$and": [{"family": "keyroom"}, {"outcome": "success"}]}
        ok_collection = bank.view._for("step", "keyroom", "ok")
        cases = {
            "bank layout, raw chroma (family+outcome)": (
                lambda q: set(ok_collection.query(query_embeddings=q[None], n_results=10, include=[])["ids"][0]),
                kr_ok,
            ),
            "bank family+outcome (retriever query)": (
                lambda q: {h.id for h in bank.query_steps("keyroom", embeddings=q[None], k=10, where_outcome="success")[0]},
                kr_ok,
            ),
            "bank family only (2 buckets merged)": (
                lambda q: {h.id for h in bank.query_steps("keyroom", embeddings=q[None], k=10)[0]},
                kr,
            ),
            "flat unfiltered": (
                lambda q: set(flat.query(query_embeddings=q[None], n_results=10, include=[])["ids"][0]),
                np.ones(n, bool),
            ),
            "flat where family+outcome": (
                lambda q: set(flat.query(query_embeddings=q[None], n_results=10, where=where, include=[])["ids"][0]),
                kr_ok,
            ),
        }
        rows = {}
        for name, (fn, mask) in cases.items():
            times, results = time_calls(fn, queries)
            sub, sub_ids = vectors[mask], ids[mask]
            exact_times, exact = time_calls(lambda q: exact_topk(sub, sub_ids, q, 10), queries)
            recall = float(np.mean([len(r & e) / 10 for r, e in zip(results, exact)]))
            p50, p99 = percentiles(times)
            e50, e99 = percentiles(exact_times)
            rows[name] = {"candidates": int(mask.sum()), "p50_ms": p50, "p99_ms": p99, "exact_p50_ms": e50, "exact_p99_ms": e99, "recall_at_10": recall}
        out["queries"] = rows
        base = rows["flat unfiltered"]
        raw = rows["bank layout, raw chroma (family+outcome)"]
        where_row = rows["flat where family+outcome"]
        for pct in ("p50", "p99"):
            out[f"ratio_bank_filtered_vs_unfiltered_{pct}"] = raw[f"{pct}_ms"] / base[f"{pct}_ms"]
            out[f"ratio_where_vs_unfiltered_{pct}"] = where_row[f"{pct}_ms"] / base[f"{pct}_ms"]
        bank.close()
        client.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000", help="record counts for the scale part")
    ap.add_argument("--quick", action="store_true", help="small sizes and few queries (a smoke run)")
    ap.add_argument("--queries", type=int, default=200, help="queries per case in the scale part")
    ap.add_argument("--episodes", type=int, default=40, help="keyroom episodes for the ingest part")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.quick:
        sizes, args.queries, args.episodes = [min(s, 2000) for s in sizes[:1]], 30, 8

    print(f"memory benchmark: {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}, sizes {sizes}")
    results: dict = {"cpus": os.cpu_count(), "load_average": os.getloadavg()[0]}

    episodes = play_keyroom(args.episodes, seed0=args.seed)
    minilm = SentenceTransformerEmbedding()
    texts = [f"Goal: {e.goal}\nObservation: {s.observation}" for e in episodes for s in e.steps][:128]
    emb = bench_embedding(minilm, texts, runs=10 if args.quick else 30)
    results["embedding"] = emb
    print(
        f"\n[1] query embedding (all-MiniLM-L6-v2, CPU): one text p50 {emb['single_p50_ms']:.1f} ms, "
        f"p99 {emb['single_p99_ms']:.1f} ms; batch {emb['batch_texts_per_s']:.0f} texts/s (model load {emb['load_s']:.1f} s)"
    )

    results["ingest"] = [bench_ingest(episodes, minilm, "all-MiniLM-L6-v2"), bench_ingest(episodes, HashingEmbedding(DIM), "hashing fake")]
    print(f"\n[2] ingest through ExperienceBank.ingest_episode ({args.episodes} keyroom episodes, journal fsync on)")
    for r in results["ingest"]:
        print(
            f"    {r['embedder']:<18} {r['steps']:>5} steps  {r['steps_per_s']:7.1f} steps/s  "
            f"per episode p50 {r['episode_p50_ms']:6.1f} ms  p99 {r['episode_p99_ms']:6.1f} ms"
        )

    results["scale"] = []
    for n in sizes:
        t = time.perf_counter()
        r = bench_scale(n, args.queries, args.seed)
        results["scale"].append(r)
        print(
            f"\n[3] {n} step records (precomputed clustered random unit vectors, {DIM}-d), {args.queries} queries, k=10"
            f"  [{time.perf_counter() - t:.0f} s]"
        )
        print(f"    load: bank layout {r['bank_load_records_per_s']:.0f} records/s, flat collection {r['flat_load_records_per_s']:.0f} records/s")
        print(f"    {'case':<40} {'cands':>7} {'p50 ms':>7} {'p99 ms':>7} {'exact p50':>9} {'exact p99':>9} {'recall@10':>9}")
        for name, q in r["queries"].items():
            print(
                f"    {name:<40} {q['candidates']:>7} {q['p50_ms']:7.2f} {q['p99_ms']:7.2f} "
                f"{q['exact_p50_ms']:9.2f} {q['exact_p99_ms']:9.2f} {q['recall_at_10']:9.3f}"
            )
        print(
            f"    filtered/unfiltered latency (raw chroma calls): bank layout {r['ratio_bank_filtered_vs_unfiltered_p50']:.2f}x p50, "
            f"{r['ratio_bank_filtered_vs_unfiltered_p99']:.2f}x p99; "
            f"Chroma where {r['ratio_where_vs_unfiltered_p50']:.1f}x p50, {r['ratio_where_vs_unfiltered_p99']:.1f}x p99"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
