"""The drift monitor (`memory.synthesis.drift`): the MMD test, per-family verdicts on a bank,
their cache, the down-weighting of synthetic records in retrieval, and `crl memory stats`.

One bank is built per module with the hashing embedding, two families of 8 real and 8
synthetic episodes (5 steps each):

    keyroom  synthetic states drawn like the real ones      -> no drift
    maze     synthetic states from another vocabulary       -> drift
"""

from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import crl.memory.synthesis.drift as drift
from crl.agent.cli.main import app
from crl.memory.config import DriftConfig
from crl.memory.retrieval.config import RetrievalConfig
from crl.memory.retrieval.episodic_control import VoteWeights, action_values, memory_advantages
from crl.memory.retrieval.rerank import Candidate, score
from crl.memory.retrieval.retriever import RetrievalQuery, Retriever
from crl.memory.storage.embeddings import HashingEmbedding, SentenceTransformerEmbedding
from tests.retrieval_fixtures import (  # noqa: F401  (fixtures)
    bank,
    episode,
    episode_record,
    no_default_embedding,
    open_test_bank,
    step_record,
)

WORDS = "hall kitchen lamp table rug window shelf box stair cellar attic bench mirror clock vase sofa".split()
FAR_WORDS = "ocean volcano rocket penguin galaxy desert canyon meteor glacier tundra comet lagoon".split()
ACTIONS = ["go north", "go south", "look", "open box", "take lamp"]
N_EPISODES, N_STEPS = 8, 5
NOW = 1_700_000_000.0


def wandering(run_id: str, i: int, words: list[str], rng: random.Random, family: str, source: str):
    """An episode of N_STEPS random moves through rooms described by 4 words of `words`."""
    ep = episode(
        run_id,
        i,
        [rng.choice(ACTIONS) for _ in range(N_STEPS)],
        success=i % 2 == 0,
        observations=[" ".join(rng.sample(words, 4)) for _ in range(N_STEPS)],
        task=f"{family}/key",
    )
    ep.source = source
    if source == "synthetic":
        ep.provenance = {"kind": "test"}
    return ep


def fill(bank, family: str, synthetic_words: list[str], seed: int) -> None:
    rng = random.Random(seed)
    for i in range(N_EPISODES):
        bank.ingest_episode(wandering(f"{family}-real", i, WORDS, rng, family, "real"))
        bank.ingest_episode(wandering(f"{family}-syn", i, synthetic_words, rng, family, "synthetic"))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A data directory (`.crl`) whose bank holds the two families of the module docstring."""
    home = tmp_path_factory.mktemp("drift") / ".crl"
    bank = open_test_bank(home)
    try:
        fill(bank, "keyroom", WORDS, seed=1)
        fill(bank, "maze", FAR_WORDS, seed=2)
    finally:
        bank.close()
    return home


@pytest.fixture
def home(built, tmp_path) -> Path:
    """A private copy of the built data directory."""
    copy = tmp_path / ".crl"
    shutil.copytree(built, copy)
    return copy


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


# ---- the statistic ------------------------------------------------------------------------


def test_mmd_fires_on_a_known_shift_and_not_on_the_same_distribution():
    rng = np.random.default_rng(7)
    centre = rng.normal(size=32)
    real = unit(centre + rng.normal(size=(300, 32)))
    same = unit(centre + rng.normal(size=(300, 32)))
    shifted = unit(centre + rng.normal(size=(300, 32)) + 3.0 * np.eye(32)[0] + 3.0 * np.eye(32)[1])
    cfg = DriftConfig()

    calm = drift.mmd_test(real, same, permutations=cfg.permutations, seed=0)
    moved = drift.mmd_test(real, shifted, permutations=cfg.permutations, seed=0)

    assert calm.p_value > 0.05 and abs(calm.mmd2) < cfg.min_mmd2
    assert moved.p_value <= cfg.p_value and moved.mmd2 >= cfg.min_mmd2
    assert moved.p_value == pytest.approx(1 / (cfg.permutations + 1))
    assert drift.mmd_test(real, shifted, permutations=50, seed=3) == drift.mmd_test(
        real, shifted, permutations=50, seed=3
    )


def test_mmd_subsamples_large_samples_and_stays_fast():
    rng = np.random.default_rng(0)
    x, y = unit(rng.normal(size=(3000, 384))), unit(rng.normal(size=(2500, 384)))
    t0 = time.perf_counter()
    result = drift.mmd_test(x, y, permutations=200, seed=0, max_samples=400)
    elapsed = time.perf_counter() - t0
    assert (result.n_x, result.n_y) == (400, 400)
    assert elapsed < 2.0  # ~0.05 s measured; the bound only catches a test on the whole sample
    with pytest.raises(ValueError, match="two samples"):
        drift.mmd_test(x[:1], y)


def test_bandwidth_is_the_median_pairwise_distance():
    points = np.array([[0.0], [1.0], [3.0]])
    d2 = (points - points.T) ** 2
    assert drift.rbf_bandwidth(d2) == pytest.approx(2.0)  # distances 1, 2, 3
    assert drift.rbf_bandwidth(np.zeros((3, 3))) == 1.0


# ---- verdicts on a bank -------------------------------------------------------------------


def test_drift_fires_for_the_shifted_family_only(home):
    bank = open_test_bank(home)
    try:
        by_family = {r.family: r for r in drift.drift_report(bank)}
        assert set(by_family) == {"keyroom", "maze"}
        calm, moved = by_family["keyroom"], by_family["maze"]
        assert (calm.n_real, calm.n_synthetic) == (N_EPISODES * N_STEPS, N_EPISODES * N_STEPS)
        assert not calm.drifted and calm.weight == 1.0 and calm.p_value > 0.05
        assert moved.drifted and moved.weight == 0.25 and moved.mmd2 >= moved.min_mmd2
        assert moved.p_value <= moved.p_threshold
        assert "DRIFTED" in moved.describe() and "no drift" in calm.describe()
        assert drift.synthetic_weight(bank, "maze") == 0.25 and drift.synthetic_weight(bank, "keyroom") == 1.0
    finally:
        bank.close()


def test_quarantined_synthetic_steps_leave_the_sample(home):
    bank = open_test_bank(home)
    try:
        synthetic = bank.ls(kind="episode", family="maze", source="synthetic")
        bank.quarantine([r.id for r in synthetic[:3]])
        result = drift.measure_drift(bank, "maze")
        assert result.n_synthetic == (N_EPISODES - 3) * N_STEPS and result.n_real == N_EPISODES * N_STEPS
    finally:
        bank.close()


def test_too_few_synthetic_steps_give_no_verdict_and_full_weight(bank):
    rng = random.Random(0)
    for i in range(5):
        bank.ingest_episode(wandering("real", i, WORDS, rng, "keyroom", "real"))
    bank.ingest_episode(wandering("syn", 0, FAR_WORDS, rng, "keyroom", "synthetic"))
    result = drift.measure_drift(bank, "keyroom")
    assert result.n_synthetic == N_STEPS and result.mmd2 is None and not result.drifted
    assert "too few" in result.note and result.weight == 1.0


def test_verdicts_are_cached_until_the_family_changes(home, monkeypatch):
    calls: list[str] = []
    measure = drift.measure_drift
    monkeypatch.setattr(drift, "measure_drift", lambda bank, family: calls.append(family) or measure(bank, family))
    bank = open_test_bank(home)
    try:
        assert drift.synthetic_weight(bank, "maze") == 0.25
        assert drift.synthetic_weight(bank, "maze") == 0.25
        assert calls == ["maze"]
        bank.ingest_episode(wandering("late", 0, WORDS, random.Random(5), "maze", "real"))
        drift.synthetic_weight(bank, "maze")
        assert calls == ["maze", "maze"]
    finally:
        bank.close()


def test_the_monitor_can_be_switched_off(home):
    bank = open_test_bank(home, drift=DriftConfig(enabled=False))
    try:
        assert drift.synthetic_weight(bank, "maze") == 1.0
        assert "off" in drift.measure_drift(bank, "maze").note
    finally:
        bank.close()


def test_drifted_weight_cannot_exceed_the_normal_one():
    with pytest.raises(ValueError, match="must not exceed"):
        DriftConfig(synthetic_weight=0.5, drifted_synthetic_weight=0.8)


# ---- retrieval ----------------------------------------------------------------------------


def test_rerank_scales_synthetic_episodes_and_steps_only():
    cfg = RetrievalConfig()
    real = episode_record("e1")
    synthetic = real.model_copy(update={"source": "synthetic"})
    base, _ = score(Candidate(real, 0.9), cfg, 0.5, NOW, synthetic_weight=0.25)
    scaled, terms = score(Candidate(synthetic, 0.9), cfg, 0.5, NOW, synthetic_weight=0.25)
    assert scaled == pytest.approx(0.25 * base) and terms["synthetic"] == pytest.approx(-0.75 * base)
    unscaled, terms = score(Candidate(synthetic, 0.9), cfg, 0.5, NOW, synthetic_weight=1.0)
    assert unscaled == pytest.approx(base) and "synthetic" not in terms


def test_synthetic_votes_count_with_the_synthetic_weight():
    cfg = RetrievalConfig()
    real = step_record("r1", 0, "take key")
    synthetic = step_record("s1", 0, "open door").model_copy(update={"source": "synthetic"})
    near = [(real, 1.0), (synthetic, 1.0)]
    full = action_values(near, ["take key", "open door"], cfg)
    down = action_values(near, ["take key", "open door"], cfg, VoteWeights(synthetic=0.25))
    assert full["open door"].support == pytest.approx(1.0) and down["open door"].support == pytest.approx(0.25)
    assert down["take key"].support == full["take key"].support == pytest.approx(1.0)
    advantages = memory_advantages(near, ["take key", "open door"], cfg, weights=VoteWeights(synthetic=0.25))
    assert advantages["open door"].support == pytest.approx(0.25)


def retrieve_at_a_synthetic_state(home: Path, **memory_fields):
    """The pack for the exact state of a stored synthetic maze step, and that step."""
    bank = open_test_bank(home, **memory_fields)
    try:
        target = bank.ls(kind="step", family="maze", source="synthetic", sort="recency")[0]
        query = RetrievalQuery(
            family="maze",
            task="maze/key",
            goal=target.goal,
            observation=target.observation,
            history=target.history,
            admissible=ACTIONS,
        )
        cfg = RetrievalConfig(epsilon=0.0, k_hints=3)
        return Retriever(bank, cfg, clock=lambda: NOW).retrieve([query])[0], target
    finally:
        bank.close()


def test_retrieval_down_weights_synthetic_records_when_drift_fires(home):
    drifted, target = retrieve_at_a_synthetic_state(home)
    calm, _ = retrieve_at_a_synthetic_state(home, drift=DriftConfig(drifted_synthetic_weight=1.0))

    assert calm.synthetic_weight == 1.0 and drifted.synthetic_weight == 0.25
    assert calm.hints[0].id == target.id and "synthetic" not in calm.hints[0].breakdown
    shown = {m.id: m for m in drifted.hints + drifted.successes + drifted.failures}
    assert all(m.record.source == "real" or m.breakdown["synthetic"] < 0 for m in shown.values())
    assert drifted.hints[0].id != target.id
    assert drifted.action_values[target.action].support < calm.action_values[target.action].support
    assert drifted.to_dict()["synthetic_weight"] == 0.25 and "synthetic_weight" not in calm.to_dict()


def test_retrieval_without_synthetic_candidates_never_tests_drift(bank, monkeypatch):
    monkeypatch.setattr(drift, "measure_drift", lambda *a: pytest.fail("drift measured"))
    bank.ingest_episode(wandering("real", 0, WORDS, random.Random(0), "keyroom", "real"))
    query = RetrievalQuery(family="keyroom", task="keyroom/key", goal="g", observation="hall lamp", admissible=ACTIONS)
    pack = Retriever(bank, RetrievalConfig(epsilon=0.0)).retrieve([query])[0]
    assert pack.hints and pack.synthetic_weight == 1.0


# ---- crl memory stats ---------------------------------------------------------------------


def test_memory_stats_shows_drift_per_family(home, monkeypatch):
    monkeypatch.setenv("CRL_HOME", str(home))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(home.parent)
    monkeypatch.setattr(SentenceTransformerEmbedding, "from_config", classmethod(lambda cls, cfg: HashingEmbedding(64)))

    r = CliRunner().invoke(app, ["memory", "stats", "--json"])
    assert r.exit_code == 0, r.output
    verdicts = {d["family"]: d for d in json.loads(r.stdout)["drift"]}
    assert verdicts["maze"]["drifted"] is True and verdicts["keyroom"]["drifted"] is False
    assert verdicts["maze"]["n_synthetic"] == N_EPISODES * N_STEPS and verdicts["maze"]["weight"] == 0.25

    text = CliRunner().invoke(app, ["memory", "stats"]).output
    assert "synthetic vs real experience" in text
    maze = next(line for line in text.splitlines() if "maze:" in line)
    assert "DRIFTED" in maze and "down-weighted ×0.25 in retrieval and datasets" in maze
    assert "no drift" in next(line for line in text.splitlines() if "keyroom:" in line)


def test_datasets_take_the_smallest_drift_factor_of_their_families(home):
    from crl.finetune.rounds import drift_factor

    bank = open_test_bank(home)
    try:
        assert drift_factor(bank, "keyroom", None) == 1.0
        assert drift_factor(bank, "maze", None) == 0.25
        assert drift_factor(bank, None, ["keyroom/key"]) == 1.0
        assert drift_factor(bank, None, ["keyroom/key", "maze/x"]) == 0.25
        assert drift_factor(bank, None, None) == 0.25
    finally:
        bank.close()
