"""A plain Chroma client, with no crl imported, can query the bank by text and gets crl's vectors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from crl.memory.bank import ExperienceBank
from crl.memory.config import MemoryConfig
from crl.memory.storage.embeddings import SentenceTransformerEmbedding
from tests.chroma_server import make_episode, no_default_embedding  # noqa: F401

PLAIN_CLIENT = """
import json, sys
import chromadb
from chromadb.config import Settings

client = chromadb.PersistentClient(path=sys.argv[1], settings=Settings(anonymized_telemetry=False))
collection = client.get_collection(sys.argv[2])
found = collection.query(query_texts=[sys.argv[3]], n_results=1, include=["distances"])
function = collection.configuration["embedding_function"]
vector = function([sys.argv[3]])[0]
print(json.dumps({
    "ids": found["ids"][0],
    "distance": found["distances"][0][0],
    "function": type(function).__module__ + "." + type(function).__name__,
    "vector": [float(x) for x in vector],
    "crl_imported": any(name == "crl" or name.startswith("crl.") for name in sys.modules),
}))
"""


@pytest.mark.slow
def test_a_plain_chroma_client_queries_the_bank_by_text(tmp_path):
    embedder = SentenceTransformerEmbedding()
    query = "Goal: Take the key in room 0.\nObservation: a hall, dusty, a key of brass"
    with ExperienceBank(tmp_path / "memory", None, MemoryConfig(fsync_journal=False), embedder=embedder) as bank:
        bank.ingest_episode(make_episode("r1", 0, success=True, n_steps=2, words="a dusty hall with a brass key"))
        bank.ingest_episode(make_episode("r1", 1, success=True, n_steps=2, words="a garden full of roses"))
        collection = bank.view.name_of("step", "keyroom", "ok")
        expected = bank.query_steps("keyroom", [query], k=1)[0][0]

    env = dict(os.environ, ANONYMIZED_TELEMETRY="False", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    out = subprocess.run(
        [sys.executable, "-c", PLAIN_CLIENT, str(tmp_path / "memory" / "chroma"), collection, query],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert not got["crl_imported"]
    assert got["function"].startswith("chromadb.utils.embedding_functions.sentence_transformer")
    assert got["ids"] == [expected.id]
    assert got["distance"] == pytest.approx(expected.distance, abs=1e-4)
    assert np.allclose(got["vector"], embedder.embed([query])[0], atol=1e-5)
