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
  4. read path: what one decision costs memory, through the real `Retriever` (embed the state,
     query episodes and steps, rerank, action values by episodic control) on a bank holding N
     keyroom step records in ONE family (N from --read-sizes) with their episodes. The records
     are copies of real played keyroom episodes, their vectors the MiniLM vectors of the real
     state texts plus a little noise (embedding N texts would take too long). Queries are states
     of held-out episodes with their admissible actions, at parallel 1 and 8; embedding is
     measured with a cold cache (every state new: a model call) and a warm one (the state seen
     before, as in a deterministic game or at ingest). Per-part p50/p99 come from the
     retriever's own timing, and the share of hit records the record cache answered. Then what
     `retrieval.ec_analogy`'s frame table costs there: the family's first read, and the read
     after one more step is stored.
  5. (--onnx) the same texts through an ONNX export of MiniLM on onnxruntime, fp32 and
     dynamic int8: agreement with the torch vectors (cosine) and latency. Needs the `onnx`
     package for the export (onnxruntime comes with chromadb).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from collections.abc import Sequence
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
from crl.memory.ingest import EpisodeTags, build_records, step_texts  # noqa: E402
from crl.memory.purpose import purpose_now, reached_subgoals  # noqa: E402
from crl.memory.records import StepRecord, step_record_id  # noqa: E402
from crl.memory.retrieval.analogous_values import FrameSteps  # noqa: E402
from crl.memory.retrieval.config import RetrievalConfig  # noqa: E402
from crl.memory.retrieval.retriever import RetrievalQuery, Retriever  # noqa: E402
from crl.memory.storage.embeddings import (  # noqa: E402
    CachedEmbedding,
    HashingEmbedding,
    SentenceTransformerEmbedding,
)
from crl.memory.trajectory import Episode, Step  # noqa: E402

FAMILIES = ("keyroom", "gridnav", "textcraft", "webshop")
DIM = 384


def percentiles(samples_s: list[float]) -> tuple[float, float]:
    """(p50, p99) in milliseconds."""
    a = np.asarray(samples_s) * 1000
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


def play_keyroom(n: int, seed0: int = 0, max_steps: int = 12) -> list[Episode]:
    """Keyroom episodes played by a policy that follows the solver 70% of the time."""
    return play_keyroom_states(n, seed0, max_steps, episode_id=lambda i, seed: f"bench-{i:05d}")[0]


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
    x = (
        centres[rng.integers(0, clusters, n)]
        + noise * rng.standard_normal((n, DIM)).astype(np.float32) / np.sqrt(DIM) * 4
    )
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
        records.append(
            StepRecord(
                id=step_record_id(family, episode_id, i % 10),
                episode_id=episode_id,
                run_id="bench",
                task=f"{family}/x",
                family=family,
                variant="x",
                seed=0,
                index=i % 10,
                goal="Reach the goal.",
                observation=f"state {i}",
                action="go north",
                episode_outcome="success" if success[i] else "failure",
                episode_return=float(success[i]),
                novelty=0.5,
                value=0.5,
                created_at=now,
                updated_at=now,
            )
        )
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
                metadatas=[
                    {"family": FAMILIES[f], "outcome": "success" if s else "failure"}
                    for f, s in zip(fam[sl], success[sl])
                ],
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
            flat.query(
                query_embeddings=q[None], n_results=10, where={"$and": [{"family": "keyroom"}, {"outcome": "success"}]}
            )

        where = {"$and": [{"family": "keyroom"}, {"outcome": "success"}]}
        ok_collection = bank.view._for("step", "keyroom", "ok")
        cases = {
            "bank layout, raw chroma (family+outcome)": (
                lambda q: set(ok_collection.query(query_embeddings=q[None], n_results=10, include=[])["ids"][0]),
                kr_ok,
            ),
            "bank family+outcome (retriever query)": (
                lambda q: {
                    h.id for h in bank.query_steps("keyroom", embeddings=q[None], k=10, where_outcome="success")[0]
                },
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
            exact_times, exact = time_calls(
                lambda q, sub=sub, sub_ids=sub_ids: exact_topk(sub, sub_ids, q, 10), queries
            )
            recall = float(np.mean([len(r & e) / 10 for r, e in zip(results, exact)]))
            p50, p99 = percentiles(times)
            e50, e99 = percentiles(exact_times)
            rows[name] = {
                "candidates": int(mask.sum()),
                "p50_ms": p50,
                "p99_ms": p99,
                "exact_p50_ms": e50,
                "exact_p99_ms": e99,
                "recall_at_10": recall,
            }
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


def play_keyroom_states(
    n: int, seed0: int, max_steps: int = 12, episode_id=lambda i, seed: f"read-{seed:06d}"
) -> tuple[list[Episode], list[RetrievalQuery]]:
    """`play_keyroom` episodes with, for every step, the retrieval query the agent made there
    (`episode_id(i, seed)` names the i-th episode)."""
    from crl.tasks.keyroom import KeyroomEnv, solve

    rng = random.Random(seed0)
    episodes, queries = [], []
    for i in range(n):
        variant = rng.choice(["key", "door", "chest", "compound"])
        env = KeyroomEnv(variant)
        obs = env.reset(seed0 + i)
        ep = Episode(
            episode_id=episode_id(i, seed0 + i),
            run_id="bench",
            task=f"keyroom/{variant}",
            seed=seed0 + i,
            goal=obs.goal,
        )
        reached: set[str] = set()
        for t in range(max_steps):
            history = [s.action for s in ep.steps]
            queries.append(
                RetrievalQuery(
                    "keyroom",
                    ep.task,
                    obs.goal,
                    obs.text,
                    history,
                    list(obs.admissible_actions or []),
                    seed=ep.seed,
                    purpose=purpose_now(ep.task, reached),
                )
            )
            plan = solve(env)
            action = plan[0] if plan and rng.random() < 0.7 else rng.choice(obs.admissible_actions or ["look"])
            nxt, reward, done, info = env.step(action)
            ep.steps.append(Step(index=t, observation=obs.text, action=action, reward=reward, done=done, info=info))
            reached |= reached_subgoals(info)
            obs = nxt
            if done:
                break
        ep.status = "done" if ep.steps[-1].done else "truncated"
        ep.success = bool(ep.steps[-1].done)
        ep.total_return = sum(s.reward for s in ep.steps)
        ep.ended_at = time.time()
        episodes.append(ep)
    return episodes, queries


def replicated_records(
    episodes: list[Episode], vectors: dict[str, np.ndarray], n_steps: int, rng: np.random.Generator, noise: float
) -> tuple[list, np.ndarray]:
    """Episode and step records (with vectors) of copies of `episodes` until `n_steps` steps."""
    records, rows, copies, total = [], [], 0, 0
    now = time.time()
    while total < n_steps:
        base = episodes[copies % len(episodes)]
        ep = Episode.from_dict(base.to_dict())
        ep.episode_id = f"{base.episode_id}-c{copies}"
        copies += 1
        texts = step_texts(ep, MemoryConfig().history_steps)
        tags = EpisodeTags([0.5] * len(ep.steps), [0.5] * len(ep.steps), 0.5)
        ep_record, steps = build_records(ep, tags, MemoryConfig().history_steps, now)
        steps = steps[: n_steps - total]
        base_vectors = np.stack([vectors[t] for t in texts[: len(steps)]])
        jitter = rng.standard_normal(base_vectors.shape).astype(np.float32) * noise / np.sqrt(DIM)
        step_vectors = base_vectors + jitter
        step_vectors /= np.linalg.norm(step_vectors, axis=1, keepdims=True)
        records += [ep_record, *steps]
        rows += [step_vectors[0], *step_vectors]
        total += len(steps)
    return records, np.stack(rows).astype(np.float32)


def _timing_rows(timings: list[dict], per: int) -> dict:
    out = {}
    for part in ("embed_ms", "bank_ms", "rank_ms", "total_ms"):
        a = np.asarray([t[part] for t in timings])
        out[part] = {"p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99))}
    total = np.asarray([t["total_ms"] for t in timings]) / per
    out["per_decision_ms"] = {"p50": float(np.percentile(total, 50)), "p99": float(np.percentile(total, 99))}
    return out


def stored_states(minilm: SentenceTransformerEmbedding, n_episodes: int, seed: int):
    """Played keyroom episodes to copy into the read-path bank, and the MiniLM vector of each state text."""
    stored, _ = play_keyroom_states(n_episodes, seed0=10_000 + seed)
    texts = sorted({t for ep in stored for t in step_texts(ep, MemoryConfig().history_steps)})
    return stored, dict(zip(texts, minilm.embed(texts)))


def bench_read_path(
    n: int,
    minilm: SentenceTransformerEmbedding,
    n_queries: int,
    seed: int,
    stored: tuple[list[Episode], dict],
    query_threads: Sequence[int] = (RetrievalConfig().query_threads,),
) -> dict:
    """The retriever's whole read path on a bank of `n` keyroom steps (see part 4), once per
    `retrieval.query_threads` value in `query_threads` (case names then say which)."""
    rng = np.random.default_rng(seed)
    stored_episodes, vectors = stored
    _, queries = play_keyroom_states(max(8, n_queries // 6), seed0=50_000 + seed)
    queries = queries[:n_queries]
    records, matrix = replicated_records(stored_episodes, vectors, n, rng, noise=0.05)
    out: dict = {"records": n, "episodes": sum(1 for r in records if r.kind == "episode"), "queries": len(queries)}
    with tempfile.TemporaryDirectory() as tmp:
        config = MemoryConfig(fsync_journal=False)
        bank = ExperienceBank(Path(tmp) / "memory", None, config, embedder=minilm)
        t = time.perf_counter()
        for start in range(0, len(records), 5000):
            bank.view.put(records[start : start + 5000], matrix[start : start + 5000], None)
        out["load_s"] = time.perf_counter() - t
        cache = bank.embedder
        assert isinstance(cache, CachedEmbedding)
        warming = Retriever(bank, seed=seed)
        for q in queries[:5]:  # warm Chroma's index
            warming.retrieve([q])
        warming.fanout.close()
        cases = [(parallel, threads) for threads in query_threads for parallel in (1, 8)]
        for parallel, threads in cases:
            retriever = Retriever(bank, RetrievalConfig(query_threads=threads), seed=seed)
            batches = [queries[i : i + parallel] for i in range(0, len(queries) - parallel + 1, parallel)]
            for mode in ("cold", "warm"):
                timings = []
                before = bank.view.records.stats() if bank.view.records is not None else None
                cache.clear()
                if mode == "warm":
                    cache.embed([retriever.query_text(q) for q in queries])
                for batch in batches:
                    if mode == "cold":
                        cache.clear()
                    retriever.retrieve(batch)
                    timings.append(dict(retriever.last_timing))
                row = _timing_rows(timings, parallel)
                if before is not None:
                    after = bank.view.records.stats()
                    hits, misses = after["hits"] - before["hits"], after["misses"] - before["misses"]
                    row["record_cache_hit_rate"] = hits / max(1, hits + misses)
                name = f"parallel {parallel}, {mode} cache"
                out[name if len(query_threads) == 1 else f"{name}, {threads} thread{'s' * (threads > 1)}"] = row
            retriever.fanout.close()
        out["frame_table"] = bench_frame_table(bank, records, matrix)
        bank.close()
    return out


def bench_frame_table(bank: ExperienceBank, records: list, matrix: np.ndarray) -> dict:
    """What `retrieval.ec_analogy`'s frame table costs on this bank: the first read of the family
    (every step), and the read after one more step is stored (only the steps since the newest)."""
    steps = [(r, v) for r, v in zip(records, matrix) if isinstance(r, StepRecord)]
    family = steps[0][0].family
    frames = FrameSteps(bank)
    t = time.perf_counter()
    table = frames.of(family)
    full_ms = 1000 * (time.perf_counter() - t)
    frame_steps = sum(len(v) for v in table.values())
    last, vector = steps[-1]
    newest = max(r.created_at for r, _ in steps)
    episode_id = last.episode_id + "-new"
    update = {"id": step_record_id(family, episode_id, last.index), "episode_id": episode_id, "created_at": newest + 1}
    bank.view.put([last.model_copy(update=update)], vector[None, :], None)
    t = time.perf_counter()
    frames.of(family)
    return {
        "steps": len(steps),
        "frames": frame_steps,
        "full_read_ms": full_ms,
        "after_one_new_step_ms": 1000 * (time.perf_counter() - t),
    }


def bench_onnx(minilm: SentenceTransformerEmbedding, texts: list[str], runs: int, folder: Path) -> dict:
    """MiniLM exported to ONNX (torch.onnx), on onnxruntime with one thread: fp32 and dynamic int8."""
    try:
        import onnx  # noqa: F401
        import onnxruntime as ort
        import torch
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as e:
        return {"skipped": f"{e}; pip install onnx to export the model"}
    from transformers import AutoModel, AutoTokenizer

    from crl.memory.storage.embeddings import resolve_model_path

    path = resolve_model_path(minilm.model_name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    max_length = minilm._loaded().max_seq_length
    fp32, int8 = folder / "minilm.onnx", folder / "minilm.int8.onnx"
    if not fp32.exists():

        class Encoder(torch.nn.Module):
            def __init__(self, model):
                super().__init__()
                self.model = model

            def forward(self, input_ids, attention_mask, token_type_ids):
                return self.model(
                    input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
                ).last_hidden_state

        sample = tokenizer(["open the door", "take the key"], padding=True, return_tensors="pt")
        names = ["input_ids", "attention_mask", "token_type_ids"]
        torch.onnx.export(
            Encoder(AutoModel.from_pretrained(path).eval()),
            tuple(sample[k] for k in names),
            str(fp32),
            input_names=names,
            output_names=["hidden"],
            dynamic_axes={k: {0: "batch", 1: "tokens"} for k in [*names, "hidden"]},
            opset_version=17,
            dynamo=False,
        )
        quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
    reference = minilm.embed(texts)
    out: dict = {}
    for label, file in (("onnx fp32", fp32), ("onnx int8", int8)):
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(file), options, providers=["CPUExecutionProvider"])

        def embed(batch, session=session):
            enc = tokenizer(batch, padding=True, truncation=True, max_length=max_length, return_tensors="np")
            feeds = {i.name: enc[i.name].astype(np.int64) for i in session.get_inputs()}
            hidden = session.run(None, feeds)[0]
            mask = enc["attention_mask"][..., None].astype(np.float32)
            v = (hidden * mask).sum(1) / np.maximum(mask.sum(1), 1e-9)
            return v / np.linalg.norm(v, axis=1, keepdims=True)

        cosine = (embed(texts) * reference).sum(1)
        embed(texts[:1])
        single = []
        for i in range(runs):
            t = time.perf_counter()
            embed([texts[i % len(texts)]])
            single.append(time.perf_counter() - t)
        p50, p99 = percentiles(single)
        out[label] = {"cosine_min": float(cosine.min()), "single_p50_ms": p50, "single_p99_ms": p99}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000", help="record counts for the scale part")
    ap.add_argument("--quick", action="store_true", help="small sizes and few queries (a smoke run)")
    ap.add_argument("--queries", type=int, default=200, help="queries per case in the scale part")
    ap.add_argument("--episodes", type=int, default=40, help="keyroom episodes for the ingest part")
    ap.add_argument("--read-sizes", default="10000,100000", help="records in one family for the read-path part")
    ap.add_argument(
        "--embedding-runtime",
        choices=("auto", "torch", "onnx"),
        default=MemoryConfig().embedding_runtime,
        help="memory.embedding_runtime of the embedder every part uses",
    )
    ap.add_argument(
        "--query-threads",
        default=str(RetrievalConfig().query_threads),
        help="retrieval.query_threads values the read-path part compares, e.g. 1,2",
    )
    ap.add_argument("--read-queries", type=int, default=240, help="states retrieved per read-path case")
    ap.add_argument("--onnx", action="store_true", help="also measure an ONNX export of MiniLM (needs `onnx`)")
    ap.add_argument("--skip", default="", help="parts to leave out, e.g. 2,3")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="also write the figures to this file")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    read_sizes = [int(s) for s in args.read_sizes.split(",") if s]
    query_threads = [int(s) for s in args.query_threads.split(",") if s]
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    if args.quick:
        sizes, args.queries, args.episodes = [min(s, 2000) for s in sizes[:1]], 30, 8
        read_sizes, args.read_queries = [min(s, 2000) for s in read_sizes[:1]], 32

    print(f"memory benchmark: {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.1f}, sizes {sizes}")
    results: dict = {"cpus": os.cpu_count(), "load_average": os.getloadavg()[0]}

    episodes = play_keyroom(args.episodes, seed0=args.seed)
    minilm = SentenceTransformerEmbedding(runtime=args.embedding_runtime)
    texts = [f"Goal: {e.goal}\nObservation: {s.observation}" for e in episodes for s in e.steps][:128]
    emb = bench_embedding(minilm, texts, runs=10 if args.quick else 30)
    results["embedding"] = emb
    results["embedding_runtime"] = minilm.runtime_in_use
    print(
        f"\n[1] query embedding (all-MiniLM-L6-v2, CPU, {minilm.runtime_in_use}): one text p50 {emb['single_p50_ms']:.1f} ms, "
        f"p99 {emb['single_p99_ms']:.1f} ms; batch {emb['batch_texts_per_s']:.0f} texts/s (model load {emb['load_s']:.1f} s)"
    )

    if args.onnx:
        with tempfile.TemporaryDirectory() as tmp:
            reference = SentenceTransformerEmbedding(runtime="torch")
            results["onnx"] = onnx = bench_onnx(reference, texts, 10 if args.quick else 30, Path(tmp))
        print("\n[5] ONNX exports of MiniLM on onnxruntime, 1 thread (cosine to the torch model's vectors)")
        for label, r in onnx.items():
            print(
                f"    {label}: {r}"
                if isinstance(r, str)
                else f"    {label:<10} cosine to torch min {r['cosine_min']:.6f}  one text p50 {r['single_p50_ms']:.1f} ms"
                f"  p99 {r['single_p99_ms']:.1f} ms"
            )

    results["ingest"] = (
        []
        if "2" in skip
        else [
            bench_ingest(episodes, minilm, "all-MiniLM-L6-v2"),
            bench_ingest(episodes, HashingEmbedding(DIM), "hashing fake"),
        ]
    )
    if results["ingest"]:
        print(
            f"\n[2] ingest through ExperienceBank.ingest_episode ({args.episodes} keyroom episodes, journal fsync on)"
        )
        for r in results["ingest"]:
            print(
                f"    {r['embedder']:<18} {r['steps']:>5} steps  {r['steps_per_s']:7.1f} steps/s  "
                f"per episode p50 {r['episode_p50_ms']:6.1f} ms  p99 {r['episode_p99_ms']:6.1f} ms"
            )

    results["scale"] = []
    for n in [] if "3" in skip else sizes:
        t = time.perf_counter()
        r = bench_scale(n, args.queries, args.seed)
        results["scale"].append(r)
        print(
            f"\n[3] {n} step records (precomputed clustered random unit vectors, {DIM}-d), {args.queries} queries, k=10"
            f"  [{time.perf_counter() - t:.0f} s]"
        )
        print(
            f"    load: bank layout {r['bank_load_records_per_s']:.0f} records/s, flat collection {r['flat_load_records_per_s']:.0f} records/s"
        )
        print(
            f"    {'case':<40} {'cands':>7} {'p50 ms':>7} {'p99 ms':>7} {'exact p50':>9} {'exact p99':>9} {'recall@10':>9}"
        )
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
    results["read_path"] = []
    stored = stored_states(minilm, 40 if args.quick else 200, args.seed) if "4" not in skip else None
    for n in [] if stored is None else read_sizes:
        t = time.perf_counter()
        r = bench_read_path(n, minilm, args.read_queries, args.seed, stored, query_threads)
        results["read_path"].append(r)
        print(
            f"\n[4] read path through Retriever.retrieve: {n} keyroom step records in one family "
            f"({r['episodes']} episodes, loaded in {r['load_s']:.0f} s), {r['queries']} states  "
            f"[{time.perf_counter() - t:.0f} s]"
        )
        print(
            f"    {'case':<26} {'embed':>13} {'bank query':>13} {'rank+values':>13} {'per decision':>13}  "
            "(p50/p99 ms)  record cache hits"
        )
        for name, row in r.items():
            if isinstance(row, dict) and name != "frame_table":
                cells = [row[p] for p in ("embed_ms", "bank_ms", "rank_ms", "per_decision_ms")]
                rate = row.get("record_cache_hit_rate")
                print(
                    f"    {name:<26} "
                    + " ".join(f"{c['p50']:6.1f}/{c['p99']:6.1f}" for c in cells)
                    + ("" if rate is None else f"  {100 * rate:5.1f}%")
                )
        frame = r["frame_table"]
        print(
            f"    ec_analogy's frame table ({frame['frames']} frame steps of {frame['steps']}): first read "
            f"{frame['full_read_ms']:.0f} ms, after one new step {frame['after_one_new_step_ms']:.1f} ms"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
