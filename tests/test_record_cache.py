"""The embedded store's record cache: queries answered through it equal Chroma's own, writes are
seen at once, a fill that raced a write is dropped, and a server store is never cached."""

from __future__ import annotations

import numpy as np

from crl.memory.bank import ExperienceBank
from crl.memory.config import MemoryConfig
from crl.memory.storage.embeddings import HashingEmbedding
from crl.memory.storage.record_cache import CachedRecord, RecordCache
from crl.memory.storage.store import ChromaView, Located
from tests.test_purpose import played, records


def _bank(tmp_path, **config) -> ExperienceBank:
    return ExperienceBank(tmp_path / "memory", None, MemoryConfig(**config), embedder=HashingEmbedding())


def _stored(bank: ExperienceBank, rng: np.random.Generator) -> list:
    """Steps of solved compound and door games (purposes key, door, chest) with random unit vectors."""
    steps = [s for seed in range(6) for s in records(played("compound", seed))]
    steps += [s for seed in range(6, 8) for s in records(played("door", seed))]
    vectors = rng.standard_normal((len(steps), 384)).astype(np.float32)
    bank.view.put(steps, vectors / np.linalg.norm(vectors, axis=1, keepdims=True), None)
    return steps


def _plain(bank: ExperienceBank, **options) -> ChromaView:
    """A second view of the bank's store with no record cache (as a server view reads)."""
    return ChromaView(
        bank.view.client, bank.embedder, MemoryConfig(record_cache_size=0), bank.journal.journal_id, **options
    )


def _rows(hits) -> list[list[tuple[str, float, str | None]]]:
    return [[(h.id, round(h.similarity, 5), h.record.purpose) for h in row] for row in hits]


def test_an_lru_keeps_at_most_its_size_and_drops_a_fill_that_raced_a_write():
    cache = RecordCache(2)
    entry = CachedRecord(object(), None, "c", 0)
    cache.fill({"a": entry, "b": entry}, cache.generation)
    cache.get_many(["a"])
    cache.fill({"c": entry}, cache.generation)
    assert cache.get_many(["a", "b", "c"])[1] == ["b"]
    before = cache.generation
    cache.drop(["a"])
    cache.fill({"d": entry}, before)
    assert cache.get_many(["a", "d"])[1] == ["a", "d"] and len(cache) == 1


def test_cached_queries_return_what_chroma_returns_with_and_without_a_filter(tmp_path):
    bank = _bank(tmp_path)
    rng = np.random.default_rng(3)
    steps = _stored(bank, rng)
    plain = _plain(bank, use_purpose_index=False)
    indexed = _plain(bank)
    assert bank.view.records is not None and plain.records is None and indexed.records is None
    queries = rng.standard_normal((5, 384)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    door_steps = sum(1 for s in steps if s.purpose == "door")
    for where, k in [(None, 10), ({"purpose": "key"}, 5), ({"purpose": "door"}, door_steps - 1), ({"purpose": "x"}, 3)]:
        for buckets in [("ok",), ("ok", "fail")]:
            for _ in range(2):  # a cold then a warm cache
                cached = bank.view.query("step", "keyroom", buckets, queries, k, with_embeddings=True, where=where)
                direct = plain.query("step", "keyroom", buckets, queries, k, with_embeddings=True, where=where)
                uncached = indexed.query("step", "keyroom", buckets, queries, k, with_embeddings=True, where=where)
                assert _rows(cached) == _rows(direct) == _rows(uncached)
                for got, want in zip(cached[0], direct[0]):
                    assert np.allclose(got.embedding, want.embedding, atol=1e-6)
    assert {h.record.purpose for row in cached for h in row} <= {"x"}
    assert bank.view.records.stats()["hits"] > 0
    bank.close()


def test_a_credit_update_is_seen_by_the_next_query_and_by_locate(tmp_path):
    bank = _bank(tmp_path)
    steps = _stored(bank, np.random.default_rng(4))
    query = np.asarray(
        bank.view.embeddings_of([Located(steps[0], bank.view.name_of("step", "keyroom", "ok"), -1)])[steps[0].id]
    )[None]
    [row] = bank.view.query("step", "keyroom", ("ok",), query, 1)
    assert (
        row[0].id == steps[0].id
        and bank.view.locate([steps[0].id])[steps[0].id].record.utility == row[0].record.utility
    )
    located = bank.view.locate([steps[0].id])[steps[0].id]
    bank.view.update([(located, located.record.model_copy(update={"utility": 0.987}))], 7)
    [row] = bank.view.query("step", "keyroom", ("ok",), query, 1)
    assert row[0].record.utility == 0.987
    again = bank.view.locate([steps[0].id])[steps[0].id]
    assert again.record.utility == 0.987 and again.jseq == 7
    stored = bank.view.count("step", "keyroom")
    assert bank.view.count("step", "keyroom") == stored
    bank.view.delete([steps[0].id])
    assert bank.view.count("step", "keyroom") == stored - 1
    [row] = bank.view.query("step", "keyroom", ("ok",), query, 1)
    assert row[0].id != steps[0].id and steps[0].id not in bank.view.locate([steps[0].id])
    bank.close()


def test_a_server_store_is_never_cached():
    class Client:
        def get_max_batch_size(self) -> int:
            return 100

    view = ChromaView(Client(), HashingEmbedding(), MemoryConfig(url="http://127.0.0.1:9"), "j" * 12)
    assert view.records is None


def test_purpose_neighbours_are_the_nearest_steps_of_that_purpose_whichever_way_they_are_found(tmp_path):
    """The retriever takes a purpose's neighbours from the family's nearest steps when enough of them
    have it, else asks the bank; either way they are what a direct filtered query returns."""
    from crl.memory.records import state_text
    from crl.memory.retrieval.config import RetrievalConfig
    from crl.memory.retrieval.retriever import RetrievalQuery, Retriever

    bank = _bank(tmp_path)
    steps = [s for seed in range(8) for s in records(played("compound", seed))]
    bank.view.put(steps, bank.embed([state_text(s.goal, s.observation, s.history) for s in steps]), None)
    plain = _plain(bank, use_purpose_index=False)
    config = RetrievalConfig(ec_neighbours=6, ec_min_similarity=0.3, pool=8)
    retriever = Retriever(bank, config)
    ep = played("compound", 11)
    asked = []
    for step, purpose in [(ep.steps[0], "key"), (ep.steps[0], "chest"), (ep.steps[-1], "chest"), (ep.steps[-1], "key")]:
        history = [s.action for s in ep.steps[: step.index]]
        query = RetrievalQuery("keyroom", ep.task, ep.goal, step.observation, history, ["look"], purpose=purpose)
        calls: list[str | None] = []
        original = bank.query_steps
        bank.query_steps = lambda *a, calls=calls, original=original, **kw: (
            calls.append(kw.get("purpose")) or original(*a, **kw)
        )
        [pack] = retriever.retrieve([query])
        bank.query_steps = original
        asked.append(purpose in calls)
        vector = bank.embed([retriever.query_text(query)])
        [direct] = plain.query("step", "keyroom", ("ok", "fail"), vector, 6, where={"purpose": purpose})
        want = [h.id for h in direct if h.similarity >= config.ec_min_similarity]
        assert [r.id for r, sim in pack.purpose_neighbours if sim >= config.ec_min_similarity] == want
        assert all(r.purpose == purpose for r, _ in pack.purpose_neighbours)
    assert True in asked and False in asked  # both ways were taken
    bank.close()


def test_purpose_indexes_follow_moves_repurposing_and_deletes(tmp_path):
    """A purpose query through the indexes equals Chroma's filtered search after a step moves bucket
    (quarantined: searched nowhere; failed: the fail index), changes purpose in place, or is deleted."""
    bank = _bank(tmp_path)
    rng = np.random.default_rng(5)
    steps = _stored(bank, rng)
    plain = _plain(bank, use_purpose_index=False)
    queries = rng.standard_normal((4, 384)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)

    def same_as_chroma() -> None:
        for purpose in ("key", "door", "chest"):
            for buckets in [("ok",), ("fail",), ("ok", "fail")]:
                got = bank.view.query("step", "keyroom", buckets, queries, 6, where={"purpose": purpose})
                want = plain.query("step", "keyroom", buckets, queries, 6, where={"purpose": purpose})
                assert _rows(got) == _rows(want), (purpose, buckets)

    same_as_chroma()
    door = [s for s in steps if s.purpose == "door"]
    key = [s for s in steps if s.purpose == "key"]
    found = bank.view.locate([door[0].id, door[1].id, key[0].id])
    bank.view.update(
        [
            (found[door[0].id], door[0].model_copy(update={"tier": "quarantine"})),
            (found[door[1].id], door[1].model_copy(update={"episode_outcome": "failure"})),
            (found[key[0].id], key[0].model_copy(update={"purpose": "chest"})),
        ],
        None,
    )
    same_as_chroma()
    [row] = bank.view.query("step", "keyroom", ("fail",), queries[:1], 50, where={"purpose": "door"})
    assert [h.id for h in row] == [door[1].id]
    assert bank.view.delete([door[1].id, key[1].id]) == 2
    same_as_chroma()
    names = bank.view.collection_names()
    assert bank.view.purpose_index_name("keyroom", "door", "ok") in names
    assert not any("-sp-" in n and n.endswith("-q") for n in names)
    bank.close()


def test_a_view_of_the_older_layout_is_rebuilt_with_purpose_indexes_on_open(tmp_path):
    from crl.memory.records import state_text

    bank = _bank(tmp_path)
    ep = played("compound", 2)
    bank.ingest_episode(ep)
    steps = bank.view.count("step", "keyroom")
    meta = bank.view._collection(bank.view.meta_name, create=False)
    stamped = {k: v for k, v in (meta.metadata or {}).items() if k != "layout"}
    meta.modify(metadata={**stamped, "layout": 1})
    for name in bank.view.collection_names():
        if "-sp-" in name:
            bank.view.client.delete_collection(name)
    bank.close()
    again = _bank(tmp_path)
    assert any("purpose indexes" in w for w in again.warnings)
    assert again.view.count("step", "keyroom") == steps > 0
    vector = again.embed([state_text(ep.goal, ep.steps[0].observation, [])])
    [row] = again.query_steps("keyroom", embeddings=vector, k=3, purpose="key")
    assert row and all(h.record.purpose == "key" for h in row)
    again.close()
