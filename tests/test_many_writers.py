"""Several writers on one real Chroma server and one data directory: no lost episodes, no lost
credit updates, and a rebuild from the logs reproduces exactly what the server holds.

Credit is read-modify-write (use count, utility, an EMA step of the value), so two writers that
read a record at once could each write back their own increment and lose the other's. Here
every change is journalled and applied under the journal lock after catching up on what other
writers journalled (`memory.storage.keeper`), so updates are applied one at a time in journal
order, and replaying the journal gives the same floats.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from bench.many_writers import run_bench, snapshot
from crl.memory.bank import ExperienceBank
from crl.memory.config import MemoryConfig
from crl.memory.storage.embeddings import HashingEmbedding
from tests.chroma_server import chroma_server, make_episode, no_default_embedding, write_log  # noqa: F401

CREDIT_MANY = """
    import sys
    from crl.memory.bank import ExperienceBank
    from crl.memory.config import MemoryConfig
    from crl.memory.storage.embeddings import HashingEmbedding
    memory, runs, url, namespace, writer, times = sys.argv[1:7]
    config = MemoryConfig(url=url, namespace=namespace, fsync_journal=False)
    with ExperienceBank(memory, runs, config, embedder=HashingEmbedding(64), actor=f"w{writer}") as bank:
        ids = [r.id for r in bank.ls(kind="step")][:3]
        for i in range(int(times)):
            bank.credit(ids, success=(i + int(writer)) % 2 == 0, target=0.9 if i % 3 else 0.2)
    print("done")
"""


def test_concurrent_credit_loses_no_increment(chroma_server, tmp_path):  # noqa: F811
    memory, runs = tmp_path / "memory", tmp_path / "runs"
    write_log(runs, "r0", [make_episode("r0", i, i % 2 == 0, n_steps=3) for i in range(2)])
    config = MemoryConfig(url=chroma_server.url, namespace="credits", fsync_journal=False)
    with ExperienceBank(memory, runs, config, embedder=HashingEmbedding(64)) as bank:
        bank.sync()
        ids = [r.id for r in bank.ls(kind="step")][:3]
    writers, times = 4, 15
    code = textwrap.dedent(CREDIT_MANY)
    args = [str(memory), str(runs), chroma_server.url, "credits"]
    procs = [
        subprocess.Popen([sys.executable, "-c", code, *args, str(w), str(times)], stdout=subprocess.PIPE, text=True)
        for w in range(writers)
    ]
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0 and "done" in out
    with ExperienceBank(memory, runs, config, embedder=HashingEmbedding(64)) as bank:
        records = {r.id: r for r in bank.ls(kind="step")}
        for rid in ids:
            assert records[rid].use_count == writers * times  # every increment of every writer
            wins = sum(1 for w in range(writers) for i in range(times) if (i + w) % 2 == 0)
            assert records[rid].use_successes == wins
        assert sum(1 for e in bank.state.entries if e.op == "credit") == writers * times
        live = snapshot(bank)
        bank.rebuild()
        assert snapshot(bank) == live  # replaying the journal gives the same values, exactly


@pytest.mark.slow
def test_four_crl_runs_on_one_server_lose_nothing_and_rebuild_exactly(tmp_path):
    figures = run_bench(writers=4, episodes=3, max_steps=5, embedding="hashing", root=tmp_path)
    assert figures["logged_episodes"] == figures["stored_episodes"] == 12, figures
    assert figures["lost_episodes"] == 0, figures
    assert figures["credit_increments"] > 0 and figures["lost_updates"] == 0 and figures["extra_updates"] == 0, figures
    assert figures["rebuild_identical"], figures["rebuild_differences"]
