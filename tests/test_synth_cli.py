"""`crl synth` and automatic synthesis on a data directory built by real `crl run`s of keyroom
(a scripted model plays; every synthetic episode is validated by replay in the real world)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import crl.agent.app
from crl.agent.cli.main import app
from crl.agent.llm.scripted import ScriptedModel
from crl.memory.storage.embeddings import HashingEmbedding, SentenceTransformerEmbedding
from crl.tasks.keyroom import solve
from crl.tasks.registry import fold_seeds

SEEDS = fold_seeds("keyroom/key", "train", 2)


def invoke(*args) -> object:
    return CliRunner().invoke(app, [str(a) for a in args])


def ok(*args) -> object:
    r = invoke(*args)
    assert r.exit_code == 0, r.output
    return r


def as_json(*args) -> object:
    return json.loads(ok(*args, "--json").stdout)


def play(mp, home: Path, task: str, replies: list[str], *flags) -> None:
    model = ScriptedModel([f" {a}" for a in replies] + [" look"] * 40)
    mp.setattr(crl.agent.app, "build_chat_model", lambda settings: model)
    ok("--home", home, "run", task, "-n", len(SEEDS), "--parallel", "1", "--policy", "llm", *flags)


def key_then_wander(seed: int) -> list[str]:
    return [*solve(seed, "key"), "look", "look"]


@pytest.fixture(scope="module")
def built_home(tmp_path_factory) -> Path:
    """Sub-task successes (key, door, chest) on two train worlds, and compound failures there that took the key."""
    root = tmp_path_factory.mktemp("synth-cli")
    home = root / ".crl"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)
        mp.setattr(SentenceTransformerEmbedding, "from_config", classmethod(lambda cls, config: HashingEmbedding(64)))
        for variant in ("key", "door", "chest"):
            play(mp, home, f"keyroom/{variant}", [a for s in SEEDS for a in solve(s, variant)])
        steps = [a for s in SEEDS for a in key_then_wander(s)]
        play(mp, home, "keyroom/compound", steps, "--max-steps", max(len(key_then_wander(s)) for s in SEEDS))
    return home


@pytest.fixture
def home(built_home, crl_home, monkeypatch) -> Path:
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(
        SentenceTransformerEmbedding, "from_config", classmethod(lambda cls, config: HashingEmbedding(64))
    )
    shutil.copytree(built_home, crl_home)
    return crl_home


def synthetic() -> list[dict]:
    return as_json("memory", "ls", "--source", "synthetic", "--limit", "0")


def test_segment_lists_each_skill_and_stores_nothing(home):
    rows = as_json("synth", "segment", "--limit", "0")
    reached = {(r["task"], r["skill"]) for r in rows if r["reached"] == "yes"}
    assert {("keyroom/key", "key"), ("keyroom/door", "door"), ("keyroom/chest", "chest")} <= reached
    assert ("keyroom/compound", "key") in reached
    assert any(r["task"] == "keyroom/compound" and r["skill"] == "door" and r["reached"] == "no" for r in rows)
    assert synthetic() == []


def test_relabel_dry_run_stores_nothing_then_relabel_stores_once(home):
    dry = as_json("synth", "relabel", "--dry-run")
    assert dry["dry_run"] and dry["report"]["relabelled"] == len(SEEDS)
    assert {e["task"] for e in dry["episodes"]} == {"keyroom/key"}
    assert synthetic() == []
    done = as_json("synth", "relabel")
    assert done["report"]["relabelled"] == len(SEEDS)
    stored = synthetic()
    assert len(stored) == len(SEEDS) and all(r["success"] for r in stored)
    again = as_json("synth", "relabel")
    assert again["report"]["relabelled"] == 0 and again["report"]["replay_env_steps"] == 0


def test_stitch_makes_validated_compound_successes_shown_with_provenance(home):
    made = as_json("synth", "stitch", "keyroom/compound")
    assert made["report"]["stitches_validated"] == len(SEEDS)
    assert made["report"]["replay_env_steps"] > 0
    assert sorted(e["seed"] for e in made["episodes"]) == SEEDS
    (first, *_) = made["episodes"]
    shown = ok("memory", "show", first["episode"]).output
    assert "synthetic" in shown and "stitch" in shown and "validated by replay" in shown
    assert "success True" in shown
    again = as_json("synth", "stitch", "keyroom/compound")
    assert again["report"]["stitches_tried"] == 0  # both worlds have a compound success now


def test_stitch_of_a_task_without_sub_goals_is_a_clear_error(home):
    r = invoke("synth", "stitch", "keyroom/key")
    assert r.exit_code == 1
    assert "declares no sub-goal order of its own" in r.output


def test_stitch_on_given_seeds_with_no_segments_reports_the_reason(home):
    other = fold_seeds("keyroom/key", "dev", 1)
    made = as_json("synth", "stitch", "keyroom/compound", "--seeds", other[0], "--threshold", "0.99", "--dry-run")
    assert made["report"]["stitches_validated"] == 0
    assert made["rejected"] and made["rejected"][0]["seed"] == other[0]


def look_around_once(home: Path, monkeypatch, *flags) -> dict:
    """One two-step keyroom/compound run by a model that only looks; its `run.json`."""
    model = ScriptedModel(lambda msgs: " look")
    monkeypatch.setattr(crl.agent.app, "build_chat_model", lambda settings: model)
    before = {r["run_id"] for r in as_json("runs")}
    ok("run", "keyroom/compound", "-n", 1, "--parallel", "1", "--policy", "llm", "--max-steps", 2, *flags)
    (run,) = [r for r in as_json("runs") if r["run_id"] not in before]
    return json.loads((home / "runs" / run["run_id"] / "run.json").read_text())


def test_automatic_synthesis_during_a_run_stores_stitches_and_records_replay_cost(home, monkeypatch):
    monkeypatch.setenv("CRL_SYNTHESIS__AUTO", "true")
    monkeypatch.setenv("CRL_SYNTHESIS__EVERY", "1")
    info = look_around_once(home, monkeypatch)
    assert info["synthesis"]["passes"] == 1
    assert info["synthesis"]["stitches_validated"] == len(SEEDS)
    assert info["synthesis"]["relabelled"] == len(SEEDS)
    assert info["synthesis"]["replay_env_steps"] > 0
    kinds = {(r["task"], r["success"]) for r in synthetic()}
    assert kinds == {("keyroom/key", True), ("keyroom/compound", True)}


def test_mine_dry_run_stores_nothing_then_mined_rules_are_listed_as_rules(home):
    dry = as_json("synth", "mine", "--dry-run", "--min-support", 2)
    assert dry["dry_run"] and dry["kept"] >= 1
    texts = [c["text"] for c in dry["candidates"] if c["kept"]]
    assert any("'door' only after" in t or "only after 'open" in t for t in texts), texts
    assert as_json("memory", "ls", "--kind", "rule") == []
    stored = as_json("synth", "mine", "--min-support", 2)
    assert stored["kept"] == dry["kept"]
    rules = as_json("memory", "ls", "--kind", "rule")
    assert {r["text"] for r in rules} == set(texts)
    assert all("mined" in r["tags"] for r in rules)


def test_stitch_by_family_finds_the_compound_task_with_the_knobs_played(home):
    made = as_json("synth", "stitch", "--family", "keyroom", "--dry-run")
    assert made["report"]["stitches_validated"] == len(SEEDS)
    assert {e["task"] for e in made["episodes"]} == {"keyroom/compound"}
    assert synthetic() == []


def test_stitch_refuses_a_family_that_is_not_the_tasks_or_has_no_compound_task(home):
    mismatch = invoke("synth", "stitch", "keyroom/compound", "--family", "twx")
    assert mismatch.exit_code == 2 and "not 'twx'" in mismatch.output
    none = invoke("synth", "stitch", "--family", "twx")
    assert none.exit_code == 1 and "declares no compound task" in none.output
    bogus = invoke("synth", "stitch", "keyroom/compound", "--similarity", "cosine")
    assert bogus.exit_code == 2 and "lexical" in bogus.output


def test_stitch_with_the_embedding_similarity_matches_other_worlds_by_cosine(home):
    other = fold_seeds("keyroom/key", "dev", 1)[0]
    args = ("synth", "stitch", "keyroom/compound", "--seeds", other, "--threshold", "0.999", "--dry-run")
    lexical = as_json(*args)
    embedding = as_json(*args, "--similarity", "embedding")
    best = [r["rejected"][0]["detail"] for r in (lexical, embedding)]
    assert all("best similarity" in d for d in best)
    assert best[0] != best[1]  # word overlap and the (hashing) embedding's cosine score the same starts apart
    same_world = as_json("synth", "stitch", "keyroom/compound", "--similarity", "embedding", "--dry-run")
    assert same_world["report"]["stitches_validated"] == len(SEEDS)  # same-world segments need no similarity


def test_segment_accepts_dry_run_and_stores_nothing(home):
    assert as_json("synth", "segment", "--dry-run", "--limit", "0")
    assert synthetic() == []


def test_a_synthetic_episode_is_removed_like_any_other_and_not_made_again(home):
    made = as_json("synth", "stitch", "keyroom/compound")
    gone = made["episodes"][0]["episode"]
    (removed,) = as_json("memory", "rm", gone, "--yes")["ids"]
    assert removed.endswith(gone)
    left = synthetic()
    assert removed not in {r["id"] for r in left} and len(left) == len(SEEDS) - 1
    assert invoke("memory", "show", gone).exit_code != 0
    again = as_json("synth", "stitch", "keyroom/compound")
    assert again["episodes"] == []  # the same stitch validates again, but the user's removal stands
    (refused,) = again["rejected"]
    assert refused["reason"] == "removed" and refused["seed"] == made["episodes"][0]["seed"]
    assert len(synthetic()) == len(SEEDS) - 1


def test_automatic_mining_during_a_run_stores_rules_that_explain_shows(home, monkeypatch):
    monkeypatch.setenv("CRL_SYNTHESIS__AUTO", "true")
    monkeypatch.setenv("CRL_SYNTHESIS__EVERY", "1")
    monkeypatch.setenv("CRL_SYNTHESIS__MINE", "true")
    monkeypatch.setenv("CRL_REFLECT__MINE__MIN_SUPPORT", "2")
    info = look_around_once(home, monkeypatch)
    assert info["synthesis"]["mining_passes"] == 1 and info["synthesis"]["rules_kept"] >= 1
    rules = as_json("memory", "ls", "--kind", "rule")
    assert rules and all("mined" in r["tags"] for r in rules)
    monkeypatch.setenv("CRL_SYNTHESIS__AUTO", "false")
    second = look_around_once(home, monkeypatch, "--memory", "full")
    steps = as_json("explain", second["run_id"], 0)
    shown = {m["id"] for s in steps for m in s["memories"] if m.get("slot") == "rule"}
    assert shown & {r["id"] for r in rules}
