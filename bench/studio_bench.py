"""Studio benchmark: page load and search latency on a large bank (default 50,000 episode records).

    python -m bench.studio_bench [--records 50000] [--repeats 20] [--json FILE]

How the bank is built (fast, and not what a real bank's embeddings look like): 16 keyroom
episodes are played for real (70% solver moves), stored through `ExperienceBank.ingest_episode`
and exported; the export's episode records are cloned to N records (new ids, seeds, values,
tiers, tags, and a few words appended to the embedded text, so no two vectors are equal) and
loaded by one `crl memory import` (`ExperienceBank.import_file`) in embedded mode; imported
records start quarantined, so 90% are then released and 5% pinned (two journal entries). The bank
embeds with the deterministic hashing embedder (384 dimensions), so building 50k records does
not wait for MiniLM; a search then costs the store's query, not the model's embedding (MiniLM
adds about 10 ms per query on these machines, see the README's memory figures).

What is timed, in-process through FastAPI's TestClient (HTTP parsing and rendering included,
no socket), in three phases on one studio opened on the bank:

1. before anything listed the bank: the memory browser's first page of 50, the same with
   filters and a sort (each read straight from the store by `where` filters,
   `memory.storage.paged`; the page says so), a semantic search;
2. while the listing is built in the background (`Studio.warm_up`, as `crl studio` starts it):
   the first page and a search asked for every 0.2 s until it is done, and how long it took;
3. from the listing: the pages again, a deep page of the JSON API, the 2-D map (2,000 sampled points, PCA), the searches, a
   record's page, and the filtered page right after each of a series of curation edits.

First call and p50/p95/p99 over --repeats, and the time to open the studio on the bank.
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
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from crl.agent.config import load_settings  # noqa: E402
from crl.memory.bank import ExperienceBank  # noqa: E402
from crl.memory.storage.embeddings import HashingEmbedding  # noqa: E402

DIM = 384
WORDS = "amber brass cedar copper dusty ebony faded gilded hollow iron jade lantern marble narrow oak pine quiet rusty silver tall umber velvet woven".split()
QUERIES = [
    "a locked door and a key on the floor",
    "take the brass key",
    "open the chest in the cellar",
    "you are carrying nothing",
    "unlock the oak door with the iron key",
]


def ms(samples: list[float]) -> dict[str, float]:
    """p50 / p95 / p99 / max of samples in seconds, as milliseconds."""
    a = np.asarray(samples) * 1000
    return {
        "p50_ms": float(np.percentile(a, 50)),
        "p95_ms": float(np.percentile(a, 95)),
        "p99_ms": float(np.percentile(a, 99)),
        "max_ms": float(a.max()),
    }


def template_records(work: Path) -> list[dict]:
    """Episode records of 16 really played keyroom episodes, as `crl memory export` writes them."""
    from bench.memory_bench import play_keyroom

    home = work / "template"
    bank = ExperienceBank(home / "memory", runs_dir=home / "runs", embedder=HashingEmbedding(DIM))
    try:
        for episode in play_keyroom(16):
            bank.ingest_episode(episode)
        path = work / "template.jsonl"
        bank.export(path, kinds=("episode",))
    finally:
        bank.close()
    return [json.loads(line) for line in path.read_text().splitlines()]


def clones(templates: list[dict], n: int, seed: int = 0) -> list[dict]:
    """`n` episode records made from the templates, with fresh ids and varied tags."""
    rng = random.Random(seed)
    now = time.time()
    out = []
    for i in range(n):
        r = dict(rng.choice(templates))
        eid = f"bench-{i:06d}"
        r.update(
            id=f"ep:{r['family']}:{eid}",
            episode_id=eid,
            run_id="bench",
            seed=i,
            value=round(rng.random(), 4),
            use_count=rng.randrange(0, 20),
            created_at=now - rng.random() * 30 * 86400,
            tags=["reviewed"] if rng.random() < 0.1 else [],
            text=r["text"] + " " + " ".join(rng.sample(WORDS, 4)),
        )
        r["updated_at"] = r["created_at"]
        out.append(r)
    return out


def build_bank(home: Path, n: int) -> float:
    """A data directory whose bank holds `n` episode records; returns the seconds the import took.

    Imported records start quarantined (untrusted), so `curate_tiers` then moves them as a person would.
    """
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        records = clones(template_records(work), n)
        path = work / "bench.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        bank = ExperienceBank(home / "memory", runs_dir=home / "runs", embedder=HashingEmbedding(DIM))
        try:
            t = time.perf_counter()
            bank.import_file(path)
            return time.perf_counter() - t
        finally:
            bank.close()


def curate_tiers(home: Path, seed: int = 0) -> float:
    """Release 90% of the (quarantined) imported records and pin 5%, the rest stays quarantined;
    returns the seconds it took."""
    done = home / "bench-curated"
    if done.exists():
        return 0.0
    bank = ExperienceBank(home / "memory", runs_dir=home / "runs", embedder=HashingEmbedding(DIM))
    try:
        ids = [r.id for r in bank.ls("episode", tier="quarantine")]
        random.Random(seed).shuffle(ids)
        t = time.perf_counter()
        bank.release(ids[: len(ids) * 9 // 10])
        bank.pin(ids[len(ids) * 9 // 10 : len(ids) * 19 // 20])
        done.write_text("released 90%, pinned 5%\n")
        return time.perf_counter() - t
    finally:
        bank.close()


PAGES = (
    "/memories",
    "/memories?outcome=success&sort=value",
    "/memories?tier=golden&sort=utility",
    "/memories?tier=regular&outcome=failure&sort=use",
)
FROM_STORE = 'id="listed-from"'  # the browser's note on a page read straight from the store


def timed(client, url: str, repeats: int, from_store: bool | None = None) -> dict:
    """Latency of GET `url`: the first call and p50/p95/p99 of the next `repeats` (`from_store`:
    check that the page was, or was not, read straight from the store)."""
    t = time.perf_counter()
    r = client.get(url)
    first = time.perf_counter() - t
    assert r.status_code == 200, (url, r.status_code, r.text[:300])
    if from_store is not None:
        assert (FROM_STORE in r.text) == from_store, (url, from_store)
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        r = client.get(url)
        samples.append(time.perf_counter() - t)
        assert r.status_code == 200, (url, r.status_code)
    return {"url": url, "first_ms": first * 1000} | ms(samples)


def searches(client, prefix: str, repeats: int) -> dict:
    """Latency of semantic searches over the query set (each query a new text)."""
    samples = []
    for i in range(repeats):
        q = QUERIES[i % len(QUERIES)] + f" {WORDS[i % len(WORDS)]}"
        t = time.perf_counter()
        r = client.get(prefix, params={"q": q})
        samples.append(time.perf_counter() - t)
        assert r.status_code == 200, (prefix, r.status_code, r.text[:300])
    return {"url": f"{prefix}?q=...", "queries": repeats} | ms(samples)


def during_listing(client, studio, repeats: int) -> dict:
    """Start the background listing (as `crl studio` does) and, until it is done, ask for the first
    page and a search every 0.2 s; returns their latencies and how long the listing took."""
    pages, finds, from_store = [], [], 0
    t0 = time.perf_counter()
    thread = studio.warm_up()
    i = 0
    while thread.is_alive():
        t = time.perf_counter()
        r = client.get("/memories")
        pages.append(time.perf_counter() - t)
        assert r.status_code == 200
        from_store += FROM_STORE in r.text
        t = time.perf_counter()
        r = client.get("/api/search", params={"q": QUERIES[i % len(QUERIES)] + f" {WORDS[i % len(WORDS)]}"})
        finds.append(time.perf_counter() - t)
        assert r.status_code == 200
        i += 1
        time.sleep(0.2)
    thread.join()
    listed_s = time.perf_counter() - t0
    return {
        "url": "/memories and /api/search while the listing is built",
        "listing_s": listed_s,
        "requests": len(pages),
        "pages_from_store": from_store,
        "page": ms(pages) if pages else {},
        "search": ms(finds) if finds else {},
    }


def after_edits(client, studio, repeats: int) -> dict:
    """Latency of the filtered browser page right after each of `repeats` curation edits (tag one
    record, then load `/memories?outcome=success&sort=value`): the listing follows the journal."""
    client.get("/")
    client.headers["X-CSRF-Token"] = client.app.state.guard.csrf
    ids = [r["id"] for r in client.get("/api/memories", params={"per_page": repeats}).json()["rows"]]
    scans = studio.memory.listings.scans
    samples = []
    for rid in ids:
        r = client.post("/api/memories/actions", json={"action": "tag", "ids": [rid], "tags": ["bench"]})
        assert r.status_code == 200, r.text
        t = time.perf_counter()
        r = client.get("/memories", params={"outcome": "success", "sort": "value"})
        samples.append(time.perf_counter() - t)
        assert r.status_code == 200
    return {
        "url": "/memories?outcome=success&sort=value after an edit",
        "rescans": studio.memory.listings.scans - scans,
    } | ms(samples)


def run(n: int, repeats: int, keep: Path | None = None) -> dict:
    from fastapi.testclient import TestClient

    from crl.agent.studio import Studio, create_app

    with tempfile.TemporaryDirectory() as tmp:
        home = (keep or Path(tmp)) / ".crl"
        if (home / "memory" / "journal.jsonl").exists():
            import_s = float("nan")
            print(f"bank: reusing {home}", flush=True)
        else:
            t = time.perf_counter()
            import_s = build_bank(home, n)
            build_s = time.perf_counter() - t
            print(
                f"bank: {n} episode records imported in {import_s:.1f} s ({build_s:.1f} s with the template)",
                flush=True,
            )
        curate_s = curate_tiers(home)
        if curate_s:
            print(f"bank: 90% released, 5% pinned in {curate_s:.1f} s", flush=True)
        settings = load_settings({"home": str(home)})
        t = time.perf_counter()
        bank = ExperienceBank(
            settings.memory_dir, runs_dir=settings.runs_dir, config=settings.memory, embedder=HashingEmbedding(DIM)
        )
        studio = Studio(settings, bank=bank)
        open_s = time.perf_counter() - t
        rows, during = [], {}
        with TestClient(create_app(studio), base_url="http://127.0.0.1:8750") as c:
            deep = f"/api/memories?per_page=200&page={max(1, n // 400)}"
            for url in PAGES:
                rows.append(timed(c, url, repeats, from_store=True) | {"phase": "store"})
                print(json.dumps(rows[-1]), flush=True)
            rows.append(searches(c, "/api/search", repeats) | {"phase": "store"})
            print(json.dumps(rows[-1]), flush=True)
            assert not studio.memory.listings.ready("episode")
            during = during_listing(c, studio, repeats)
            print(json.dumps(during), flush=True)
            for url in (*PAGES, deep, "/api/map?limit=2000"):
                rows.append(timed(c, url, repeats, from_store=False if url.startswith("/memories") else None))
                rows[-1]["phase"] = "listing"
                print(json.dumps(rows[-1]), flush=True)
            for prefix in ("/api/search", "/memories"):
                rows.append(searches(c, prefix, repeats) | {"phase": "listing"})
                print(json.dumps(rows[-1]), flush=True)
            first = c.get("/api/memories", params={"per_page": 1}).json()["rows"][0]["id"]
            rows.append(timed(c, f"/memories/{first}", repeats) | {"phase": "listing"})
            print(json.dumps(rows[-1]), flush=True)
            rows.append(after_edits(c, studio, repeats) | {"phase": "listing"})
            print(json.dumps(rows[-1]), flush=True)
        bank.close()
    return {
        "records": n,
        "import_s": import_s,
        "curate_s": curate_s,
        "open_s": open_s,
        "repeats": repeats,
        "rows": rows,
        "during_listing": during,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", type=Path, default=None, help="Also write the figures here.")
    ap.add_argument(
        "--keep", type=Path, default=None, help="Build the bank in this folder and keep it (reused when there)."
    )
    args = ap.parse_args()
    result = run(args.records, args.repeats, args.keep)
    print()
    print(f"{result['records']} records; studio opened in {result['open_s']:.2f} s")
    print(f"{'phase':8} {'request':52} {'first':>9} {'p50':>9} {'p95':>9} {'p99':>9}")
    for r in result["rows"]:
        first = f"{r['first_ms']:.0f} ms" if "first_ms" in r else "-"
        print(
            f"{r['phase']:8} {r['url']:52} {first:>9} {r['p50_ms']:>6.0f} ms {r['p95_ms']:>6.0f} ms {r['p99_ms']:>6.0f} ms"
        )
    d = result["during_listing"]
    print(f"listing built in the background in {d['listing_s']:.1f} s; meanwhile {d['requests']} first pages")
    if d["requests"]:
        print(
            f"  ({d['pages_from_store']} from the store) p50 {d['page']['p50_ms']:.0f} ms, p99 {d['page']['p99_ms']:.0f} ms;"
            f" searches p50 {d['search']['p50_ms']:.0f} ms, p99 {d['search']['p99_ms']:.0f} ms"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
