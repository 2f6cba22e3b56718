"""Minimal demonstrations: a won episode replayed with steps left out teaches only the steps it needed."""

from __future__ import annotations

import time
from collections import Counter

from crl.finetune.config import FinetuneConfig
from crl.finetune.prompt_replay import PromptShape
from crl.finetune.sft_data import build_sft
from crl.finetune.source import LoadedEpisodes, SourceEpisode
from crl.memory.records import EpisodeRecord, episode_record_id
from crl.memory.synthesis.minimal import needed_steps
from crl.memory.synthesis.replay import replay
from crl.tasks.keyroom import solve

CONFIG = FinetuneConfig(near_duplicate_similarity=None, sft_minimal=True)
TASK, SEED = "keyroom/compound", 3


def won_episode(actions: list[str], seed: int = SEED) -> SourceEpisode:
    played = replay(TASK, SEED, actions)
    assert played.success and len(played.steps) == len(actions)
    record = EpisodeRecord(
        id=episode_record_id("keyroom", "e1"),
        episode_id="e1",
        run_id="r",
        task=TASK,
        family="keyroom",
        variant="compound",
        seed=seed,
        goal=played.goal,
        status="done",
        outcome="success",
        success=True,
        total_return=1.0,
        length=len(actions),
        reward_sparsity=1.0,
        novelty=0.0,
        text=played.steps[0].observation,
        created_at=time.time(),
        updated_at=time.time(),
    )
    return SourceEpisode(record, played.steps, PromptShape())


def test_a_real_won_keyroom_game_teaches_only_the_steps_its_win_needed():
    plan = solve(SEED, "compound")
    assert plan[0] == "take copper key"  # the study also holds an orange vase, which the win does not need
    padded = ["take orange vase", *plan[:3], "drop orange vase", *plan[3:]]
    built = build_sft(LoadedEpisodes([won_episode(padded)], Counter()), CONFIG)
    assert [r["completion"][0]["content"] for r in built.rows] == [f"Action: {a}" for a in plan]
    assert built.dropped["unneeded"] == 2 and "detour" not in built.dropped  # loop erasure keeps both
    assert built.stats["minimal"]["episodes"] == 1 and built.stats["minimal"]["env_steps"] > len(padded)
    every = build_sft(
        LoadedEpisodes([won_episode(padded)], Counter()), CONFIG.model_copy(update={"sft_minimal": False})
    )
    assert len(every.rows) == len(padded) and "minimal" not in every.stats


def test_an_episode_that_does_not_win_again_on_replay_keeps_every_step():
    plan = solve(SEED, "compound")
    built = build_sft(LoadedEpisodes([won_episode(["take orange vase", *plan], seed=SEED + 1)], Counter()), CONFIG)
    assert len(built.rows) == len(plan) + 1 and "unneeded" not in built.dropped
    assert built.stats["minimal"]["not_replayable"] == 1


def test_a_drop_and_retake_of_the_key_goes_without_loop_erasure_and_an_early_win_cuts_what_follows():
    plan = solve(SEED, "compound")
    key = next(a for a in plan if a.startswith("take") and "key" in a)
    i = plan.index(key) + 1
    detour = [*plan[:i], f"drop {key.split(' ', 1)[1]}", key, *plan[i:]]
    found = needed_steps(TASK, SEED, [*detour, "look"])
    assert [detour[j] for j in found.kept] == plan
    assert found.replayed and len(found.left_out) == 3


def test_a_bank_with_minimal_credit_marks_the_steps_a_won_game_did_not_need_and_credit_skips_them(tmp_path):
    from crl.memory.retrieval.config import RetrievalConfig
    from crl.memory.retrieval.episodic_control import step_return
    from crl.memory.trajectory import Episode
    from tests.retrieval_fixtures import open_test_bank

    plan = solve(SEED, "compound")
    padded = ["take orange vase", *plan[:3], "drop orange vase", *plan[3:]]
    played = won_episode(padded)
    episode = Episode(episode_id="r1-0000", run_id="r1", task=TASK, seed=SEED, goal=played.record.goal, model="m")
    episode.steps = played.steps
    episode.status, episode.success, episode.total_return = "done", True, 1.0

    def stored(path, **fields):
        bank = open_test_bank(path, **fields)
        try:
            bank.ingest_episode(episode)
            return [bank.get(f"st:keyroom:r1-0000:{i}") for i in range(len(padded))]
        finally:
            bank.close()

    marked = stored(tmp_path / "minimal", minimal_credit=True)
    assert [s.action for s in marked if s.unneeded] == ["take orange vase", "drop orange vase"]
    assert not any(s.unneeded for s in stored(tmp_path / "plain"))
    bank = open_test_bank(tmp_path / "plain", minimal_credit=True)
    try:
        bank.rebuild()  # `crl memory rebuild`: an existing bank gets the marks
        assert bank.get("st:keyroom:r1-0000:0").unneeded and not bank.get("st:keyroom:r1-0000:1").unneeded
    finally:
        bank.close()
    credit = RetrievalConfig(ec_loop_erasure=True)
    assert step_return(marked[0], credit) == 0.0 and step_return(marked[1], credit) > 0
    assert step_return(marked[0], RetrievalConfig()) > 0
