"""The bank's embedding cache: hits skip the model, the LRU bound holds, vectors do not change,
and ingest reuses the vectors retrieval computed (also through a real agent run)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from chromadb.utils.embedding_functions import known_embedding_functions

import crl.memory.bank
from crl.agent.app import start_run
from crl.agent.config import load_settings
from crl.agent.llm.scripted import ScriptedModel
from crl.memory.bank import ExperienceBank
from crl.memory.config import MemoryConfig
from crl.memory.ingest import step_texts
from crl.memory.retrieval.retriever import RetrievalQuery, Retriever
from crl.memory.storage.embeddings import CachedEmbedding, CacheStats, HashingEmbedding
from crl.memory.trajectory import Episode, Step, StepExtra
from crl.prompts.state import PromptHistory
from crl.tasks.keyroom import solve
from crl.tasks.registry import fold_seeds
from tests.chroma_server import no_default_embedding  # noqa: F401


@pytest.fixture(autouse=True)
def keep_chromas_registry():
    """Chroma registers the class of every embedding function a collection is made with, under
    its name: put the real hashing fake back so the counting one does not outlive these tests."""
    saved = dict(known_embedding_functions)
    yield
    known_embedding_functions.clear()
    known_embedding_functions.update(saved)


class CountingEmbedding(HashingEmbedding):
    """The hashing fake, recording every batch it is asked to embed."""

    def __init__(self, dim: int = 32):
        super().__init__(dim)
        self.batches: list[list[str]] = []

    def embed(self, texts):
        self.batches.append(list(texts))
        return super().embed(texts)

    @property
    def texts_embedded(self) -> int:
        return sum(len(b) for b in self.batches)


def test_a_hit_does_not_call_the_model():
    model = CountingEmbedding()
    cached = CachedEmbedding(model, capacity=8)
    first = cached.embed(["open the door", "take key"])
    again = cached.embed(["take key", "open the door"])
    assert model.batches == [["open the door", "take key"]]
    assert np.array_equal(again, first[::-1])
    assert cached.stats() == CacheStats(hits=2, misses=2, size=2, capacity=8)


def test_only_the_misses_reach_the_model_once_each():
    model = CountingEmbedding()
    cached = CachedEmbedding(model, capacity=8)
    cached.embed(["look"])
    vectors = cached.embed(["go north", "look", "go north", "take key"])
    assert model.batches == [["look"], ["go north", "take key"]]
    assert np.array_equal(vectors[0], vectors[2]) and vectors.shape == (4, 32)
    assert cached.stats().hits == 2 and cached.stats().misses == 3


def test_the_least_recently_used_text_goes_first():
    model = CountingEmbedding()
    cached = CachedEmbedding(model, capacity=2)
    cached.embed(["a", "b"])
    cached.embed(["a"])  # a is now the most recent
    cached.embed(["c"])  # evicts b
    assert cached.stats().size == 2
    calls = len(model.batches)
    cached.embed(["a", "c"])
    assert len(model.batches) == calls  # both kept
    cached.embed(["b"])
    assert model.batches[-1] == ["b"]  # evicted, so embedded again
    assert cached.stats().size == 2


def test_vectors_are_the_same_with_and_without_the_cache():
    texts = [f"Goal: Take the key.\nObservation: room {i % 5}" for i in range(12)]
    plain = HashingEmbedding(32).embed(texts)
    cached = CachedEmbedding(HashingEmbedding(32), capacity=3)
    mixed = np.concatenate([cached.embed(texts[:6]), cached.embed(texts[6:])])
    assert np.array_equal(mixed, plain)
    returned = cached.embed(texts[:1])
    returned[0, 0] = 99.0  # a caller scribbling on its copy does not reach the cache
    assert np.array_equal(cached.embed(texts[:1]), plain[:1])


def test_capacity_zero_passes_every_call_through():
    model = CountingEmbedding()
    cached = CachedEmbedding(model, capacity=0)
    cached.embed(["look", "look"])
    cached.embed(["look"])
    assert model.texts_embedded == 3 and cached.stats() == CacheStats(0, 3, 0, 0)
    with pytest.raises(ValueError, match=">= 0"):
        CachedEmbedding(model, capacity=-1)


def test_the_cache_is_safe_across_threads():
    cached = CachedEmbedding(HashingEmbedding(16), capacity=50)
    texts = [f"state {i}" for i in range(200)]
    expected = HashingEmbedding(16).embed(texts)
    errors: list[str] = []

    def work(offset: int) -> None:
        for start in range(0, 200, 7):
            idx = [(start + offset + j) % 200 for j in range(7)]
            if not np.array_equal(cached.embed([texts[i] for i in idx]), expected[idx]):
                errors.append(f"thread {offset}, start {start}")

    threads = [threading.Thread(target=work, args=(k * 13,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and cached.stats().size <= 50


def _played(unusable_at: int, goal: str = "Take the key.", episode_id: str = "r1-0000") -> Episode:
    """A keyroom-like episode whose step 1 gave no usable action (written as a reply at `unusable_at`)."""
    ep = Episode(episode_id=episode_id, run_id="r1", task="keyroom/key", seed=0, goal=goal)
    actions = ["go north", "", "take key", "go south", "look"]
    for i, action in enumerate(actions):
        raw = "I think I should dance" if i == unusable_at else action
        ep.steps.append(
            Step(
                index=i,
                observation=f"You are in room {i}.",
                action=action,
                valid=bool(action),
                extra=StepExtra(raw_action=raw),
                done=i == len(actions) - 1,
                reward=1.0 if i == len(actions) - 1 else 0.0,
            )
        )
    ep.status, ep.success, ep.total_return = "done", True, 1.0
    return ep


def test_ingest_embeds_exactly_the_text_retrieval_queried(tmp_path):
    """The agent's query history shows an unusable reply as written; so must the stored state."""
    episode = _played(unusable_at=1)
    history = PromptHistory(window=4)
    queried = []
    for step in episode.steps:
        query = RetrievalQuery(
            "keyroom",
            "keyroom/key",
            episode.goal,
            step.observation,
            [h.action for h in history.recent()],
        )
        queried.append(Retriever(_BankStub()).query_text(query))
        if step.action:
            history.acted(step.action, "next")
        else:
            history.unusable(step.extra.raw_action or "", "no action")
    assert step_texts(episode, 3) == queried
    assert "Recent actions: go north | I think I should dance" in queried[2]


class _BankStub:
    config = MemoryConfig()


def test_ingest_reuses_the_vectors_retrieval_computed(tmp_path):
    model = CountingEmbedding()
    with ExperienceBank(tmp_path / "memory", None, MemoryConfig(fsync_journal=False), embedder=model) as bank:
        bank.ingest_episode(_played(unusable_at=3, goal="Open the chest."))  # something to retrieve
        retriever = Retriever(bank)
        episode = _played(unusable_at=1, episode_id="r1-0001")
        history = PromptHistory(window=4)
        for step in episode.steps:
            retriever.retrieve(
                [
                    RetrievalQuery(
                        "keyroom",
                        "keyroom/key",
                        episode.goal,
                        step.observation,
                        [h.action for h in history.recent()],
                        ["go north", "take key"],
                    )
                ]
            )
            if step.action:
                history.acted(step.action, "next")
            else:
                history.unusable(step.extra.raw_action or "", "no action")
        before = model.texts_embedded
        result = bank.ingest_episode(episode)
        assert result.new_steps == 5
        assert model.texts_embedded == before  # every step's state, and the episode's, came from the cache
        hits = bank.query_steps("keyroom", [step_texts(episode, 3)[2]], k=1)[0]
        assert hits[0].id == "st:keyroom:r1-0001:2" and hits[0].similarity == pytest.approx(1.0)
        assert bank.embedding_cache_stats().hits >= 6


def test_a_real_run_ingests_without_embedding_again(crl_home, monkeypatch):
    """Policy llm with memory in the loop, replies that are sometimes unusable: every state of
    every episode is found in the cache when the episode is ingested."""
    model = CountingEmbedding()
    monkeypatch.setattr(
        crl.memory.bank.SentenceTransformerEmbedding, "from_config", classmethod(lambda cls, config: model)
    )
    ingest = ExperienceBank.ingest_episode
    model_texts_at_ingest: list[int] = []

    def counted(bank, episode, actor=None):
        before = model.texts_embedded
        result = ingest(bank, episode, actor)
        model_texts_at_ingest.append(model.texts_embedded - before)
        return result

    monkeypatch.setattr(ExperienceBank, "ingest_episode", counted)
    seeds = fold_seeds("keyroom/key", "train", 2)
    replies = []
    for seed in seeds:
        plan = solve(seed, "key")
        replies += [f" {plan[0]}", " I would rather dance", *(f" {a}" for a in plan[1:])]
    agent = {"reply_format": "action", "parallel": 1, "policy": "llm"}
    result = start_run(
        load_settings({"home": str(crl_home), "agent": agent}), "keyroom/key", 2, model=ScriptedModel(replies)
    )
    assert any(not s.valid for e in result.episodes for s in e.steps)
    assert len(model_texts_at_ingest) == 2 and model.texts_embedded > 0
    assert model_texts_at_ingest == [0, 0]
