"""Hard negatives for DPO: inadmissible, looping and known-losing replies of failures against the
action a success took from the nearest state, on the failure's own prompt."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from crl.finetune.build import build_dataset, collect
from crl.finetune.config import FinetuneConfig
from crl.finetune.dataset_card import load_rows
from crl.finetune.dpo_data import build_dpo, pair_problem
from crl.finetune.prompt_replay import PromptShape
from crl.finetune.sft_data import episode_prompts
from crl.finetune.source import LoadedEpisodes, SourceEpisode
from crl.memory.records import EpisodeRecord, episode_record_id
from crl.memory.storage.embeddings import HashingEmbedding
from crl.memory.trajectory import LoopBreak, Step, StepExtra
from tests.finetune_fixtures import fill_bank, open_bank

ONLY = FinetuneConfig(dpo_levels=["hard_negative"], dpo_q_pairs=False, near_duplicate_similarity=None)
EMBED = HashingEmbedding(64).embed
HALL = ["go west", "go east", "look", "take brass key"]


def step(index: int, observation: str, action: str, admissible=None, **kw) -> Step:
    raw = kw.pop("raw", f"Action: {action}" if action else "")
    return Step(index, observation, action, raw_output=raw, admissible_actions=admissible or list(HALL), **kw)


def episode(name: str, steps: list[Step], success: bool, seed: int = 0) -> SourceEpisode:
    record = EpisodeRecord(
        id=episode_record_id("keyroom", name),
        episode_id=name,
        run_id="r",
        task="keyroom/key",
        family="keyroom",
        variant="key",
        seed=seed,
        goal="Find the key.",
        status="done",
        outcome="success" if success else "failure",
        success=success,
        verified=True,
        verified_by="env",
        total_return=1.0 if success else 0.0,
        length=len(steps),
        reward_sparsity=1.0,
        novelty=0.0,
        text=steps[0].observation,
        created_at=time.time(),
        updated_at=time.time(),
    )
    return SourceEpisode(record, steps, PromptShape())


def solved(name: str = "win", seed: int = 0) -> SourceEpisode:
    return episode(
        name, [step(0, "A hall.", "go west"), step(1, "A study.", "take brass key", ["take brass key"])], True, seed
    )


def build(*episodes: SourceEpisode, config: FinetuneConfig = ONLY):
    return build_dpo(LoadedEpisodes(list(episodes), Counter()), config, embed=EMBED)


def test_an_inadmissible_action_and_an_unparseable_reply_are_rejected_on_the_failures_own_prompt():
    refused = step(0, "A hall.", "dance", valid=False, info={"invalid": True})
    babble = step(1, "Nothing happens.\n\nA hall.", "", raw="Action: dance wildly", valid=False)
    crashed = step(2, "Nothing happens.\n\nA hall.", "look", valid=False, info={"error": "RuntimeError()"})
    lost = episode("lost", [refused, babble, crashed], False)
    built = build(solved(), lost)
    rows = sorted(built.rows, key=lambda r: r["rejected_step_id"])
    assert [r["rejected"][0]["content"] for r in rows] == ["Action: dance", "Action: dance wildly"]
    assert {r["negative_kind"] for r in rows} == {"inadmissible"} and {r["level"] for r in rows} == {"hard_negative"}
    assert all(r["chosen"][0]["content"] == "Action: go west" for r in rows)
    prompts = episode_prompts(lost, ONLY, None)
    assert rows[1]["prompt"] == prompts[1].messages  # the failure's prompt, not the success's
    assert "Nothing happens." in rows[1]["prompt"][1]["content"]
    assert rows[1]["chosen_step_id"] == "st:keyroom:win:0" and rows[1]["rejected_step_id"] == "st:keyroom:lost:1"
    assert all(pair_problem(r) is None for r in rows)
    assert built.stats["hard_negatives"]["found"] == {"inadmissible": 2}  # the engine crash is not the model's


def test_loop_breaker_replacements_and_repeats_are_looping_negatives():
    replaced = step(0, "A hall.", "go east", extra=StepExtra(loop_break=LoopBreak(replaced="look")))
    replaced.raw_output = "Action: look"
    again = step(1, "A hall.", "go east", extra=StepExtra(repeat=1))
    built = build(solved(), episode("loop", [replaced, again], False))
    rejected = sorted((r["rejected"][0]["content"], r["negative_kind"]) for r in built.rows)
    assert rejected == [("Action: go east", "looping"), ("Action: look", "looping")]
    assert built.stats["hard_negatives"]["pairs"] == {"looping": 2}


def test_an_action_taken_only_in_failures_from_that_state_is_known_losing():
    losers = [episode(f"lost{i}", [step(0, "A hall.", "go east")], False) for i in range(2)]
    built = build(solved(), *losers)
    assert {r["negative_kind"] for r in built.rows} == {"known-losing"}
    assert {r["rejected"][0]["content"] for r in built.rows} == {"Action: go east"}
    stricter = build(solved(), *losers, config=ONLY.model_copy(update={"hard_negative_min_losses": 3}))
    assert stricter.rows == [] and not stricter.stats["hard_negatives"]["found"]
    lucky = episode("lucky", [step(0, "A hall.", "go east"), step(1, "A study.", "take brass key")], True)
    assert build(solved(), lucky, *losers).stats["hard_negatives"]["found"] == {}  # a success took it there


def test_the_same_game_state_on_the_same_seed_comes_before_a_more_similar_state_elsewhere():
    # seed 0 visited the hall after looking (another observation, same admissible actions); seed 7
    # shows the failure's observation word for word, but in another world
    here = episode(
        "here", [step(0, "You look around.\n\nA hall.", "go west"), step(1, "A study.", "take brass key")], True
    )
    elsewhere = episode("there", [step(0, "A hall.", "look"), step(1, "A hall.", "go east")], True, seed=7)
    lost = episode("lost", [step(0, "A hall.", "dance", valid=False)], False)
    (row,) = build(elsewhere, here, lost).rows
    assert row["chosen"][0]["content"] == "Action: go west" and row["chosen_episode_id"] == here.id


def test_the_chosen_action_must_be_admissible_where_the_mistake_was_made():
    lost = episode("lost", [step(0, "A hall.", "dance", valid=False, admissible=["go north", "look"])], False)
    built = build(solved(seed=3), lost)
    assert built.rows == [] and built.dropped["hard_negative:chosen-not-admissible"] == 1
    far = episode("far", [step(0, "A cellar with rats.", "dance", valid=False)], False, seed=9)
    assert build(solved(), far).dropped["hard_negative:no-success-nearby"] == 1


def test_kinds_and_levels_are_configurable():
    lost = episode(
        "lost", [step(0, "A hall.", "dance", valid=False), step(1, "A hall.", "go east", extra={"repeat": 1})], False
    )
    only_loops = build(solved(), lost, config=ONLY.model_copy(update={"hard_negative_kinds": ["looping"]}))
    assert [r["negative_kind"] for r in only_loops.rows] == ["looping"]
    off = build(solved(), lost, config=ONLY.model_copy(update={"dpo_levels": ["trajectory"]}))
    assert [r["level"] for r in off.rows] == ["trajectory"] and off.stats["hard_negatives"]["enabled"] is False
    with pytest.raises(ValueError, match="embeddings"):
        build_dpo(LoadedEpisodes([solved(), lost], Counter()), ONLY)


def test_quarantined_steps_give_no_hard_negative():
    lost = episode("lost", [step(0, "A hall.", "dance", valid=False)], False)
    lost.quarantined_steps = {0}
    win = solved()
    assert build(win, lost).rows == []
    win.quarantined_steps = {0}
    assert build(win, episode("again", [step(0, "A hall.", "dance", valid=False)], False)).rows == []


# ---- on a bank filled by scripted runs ----------------------------------------------------------


@pytest.fixture(scope="module")
def filled_home(tmp_path_factory) -> Path:
    return fill_bank(tmp_path_factory.mktemp("hard-negatives") / ".crl")


def test_hard_negatives_are_on_by_default_and_counted_on_the_card(filled_home, tmp_path):
    bank = open_bank(filled_home)
    try:
        built = collect("dpo", bank, FinetuneConfig())
        card = build_dataset("dpo", bank, FinetuneConfig(), tmp_path / "d", family="keyroom")
        failures = {r.id for r in bank.ls(kind="episode", outcome="failure")}
    finally:
        bank.close()
    negatives = [r for r in built.rows if r["level"] == "hard_negative"]
    assert negatives and {"trajectory", "hard_negative"} <= set(built.stats["by_level"])
    # the looking agent's "look", replaced by the loop breaker, against the solver's move from that room
    assert {r["negative_kind"] for r in negatives} == {"looping"}
    assert {r["rejected"][0]["content"] for r in negatives} == {"Action: look"}
    assert all(r["rejected_episode_id"] in failures and r["chosen_episode_id"] not in failures for r in negatives)
    assert all(r["negative_kind"] is None for r in built.rows if r["level"] != "hard_negative")
    assert card.stats["hard_negatives"]["pairs"] == {"looping": len(negatives)}
    assert card.filters["hard_negative_kinds"] == ["inadmissible", "looping", "known-losing"]
    assert "## Hard negatives" in (tmp_path / "d" / "README.md").read_text()
    rows = load_rows(tmp_path / "d")
    assert sorted(k for k in rows["negative_kind"] if k) == ["looping"] * len(negatives)
