"""Synthetic experience in datasets: which synthetic episodes are accepted, and how they weigh
(`synthetic_weight`) against real ones in SFT and DPO."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from crl.finetune.build import build_dataset, collect
from crl.finetune.config import FinetuneConfig
from crl.finetune.dataset_card import write_dataset
from crl.finetune.dpo_data import build_dpo
from crl.finetune.sft_data import build_sft
from crl.finetune.source import LoadedEpisodes, SourceEpisode, exclusion_reason
from crl.finetune.synthetic_weight import weigh_synthetic
from tests.finetune_fixtures import fill_bank, open_bank
from tests.test_hard_negatives import EMBED, episode, step

CONFIG = FinetuneConfig(near_duplicate_similarity=None)
VALIDATED = {"kind": "stitch", "parents": ["a"], "validation": {"replayed": True, "success": True}}


def synthetic(source: SourceEpisode, provenance: dict | None = VALIDATED) -> SourceEpisode:
    source.record = source.record.model_copy(update={"source": "synthetic", "provenance": provenance})
    return source


def rooms(name: str, n: int, success: bool = True) -> SourceEpisode:
    return episode(name, [step(i, f"Room {name} {i}.", "go west") for i in range(n)], success)


# ---- the share --------------------------------------------------------------------------------


def test_a_synthetic_example_weighs_w_as_a_share_of_synthetic_examples_kept():
    keys = [None, *[f"st:keyroom:syn:{i}" for i in range(10)], None]
    for w, expected in [(0.0, 0), (0.25, 3), (0.5, 5), (1.0, 10)]:
        kept, share = weigh_synthetic(keys, w)
        assert share.kept == expected == len(kept) - 2 and {0, 11} <= set(kept)
        assert (share.synthetic, share.real) == (10, 2) and kept == sorted(kept)
    small, _ = weigh_synthetic(keys, 0.3)
    large, _ = weigh_synthetic(keys, 0.7)
    assert set(small) < set(large)  # a larger weight keeps a superset: rebuilds are stable
    assert weigh_synthetic(list(reversed(keys)), 0.3)[1].kept == 3
    with pytest.raises(ValueError, match="between 0 and 1"):
        weigh_synthetic(keys, 1.5)


def test_sft_keeps_the_weighted_share_of_synthetic_states_and_a_caller_may_lower_it():
    loaded = LoadedEpisodes([rooms("real", 2), synthetic(rooms("syn", 8))], Counter())
    built = build_sft(loaded, CONFIG)
    by_source = Counter(r["episode_id"].split(":")[-1] for r in built.rows)
    assert by_source == {"real": 2, "syn": 4}  # default weight 0.5
    assert built.dropped["synthetic-weight"] == 4
    assert built.stats["synthetic"]["weight"] == 0.5 and built.stats["synthetic"]["kept"] == 4
    assert "share" in built.stats["synthetic"]["scheme"]
    drifted = build_sft(loaded, CONFIG, synthetic_weight=0.25)
    assert sum(1 for r in drifted.rows if r["episode_id"].endswith("syn")) == 2
    assert {r["step_id"] for r in drifted.rows} < {r["step_id"] for r in built.rows}
    assert build_sft(loaded, CONFIG.model_copy(update={"synthetic_weight": 1.0})).dropped["synthetic-weight"] == 0


def test_a_synthetic_state_that_duplicates_a_real_one_gives_way_to_it():
    twin = episode("real", [step(i, f"Room syn {i}.", "go west") for i in range(2)], True)
    built = build_sft(LoadedEpisodes([synthetic(rooms("syn", 2)), twin], Counter()), CONFIG, synthetic_weight=1.0)
    assert [r["episode_id"] for r in built.rows] == [twin.id, twin.id] and built.dropped["duplicate"] == 2
    assert built.stats["synthetic"]["synthetic"] == 0


def test_soft_targets_expand_the_weighted_states():
    loaded = LoadedEpisodes([rooms("real", 1), synthetic(rooms("syn", 4))], Counter())
    soft = CONFIG.model_copy(update={"sft_targets": "soft", "sft_soft_rows": 3})
    built = build_sft(loaded, soft)
    assert len(built.rows) == 3 * (1 + 2) and built.stats["targets"]["states"] == 3


def test_dpo_pairs_whose_chosen_side_is_synthetic_are_weighted():
    wins = [synthetic(episode(f"syn{i}", [step(0, f"Hall {i}.", "go west")], True, seed=i)) for i in range(4)]
    losses = [episode(f"lost{i}", [step(0, f"Hall {i}.", "look")], False, seed=i) for i in range(4)]
    config = CONFIG.model_copy(update={"dpo_levels": ["trajectory"]})
    full = build_dpo(LoadedEpisodes([*wins, *losses], Counter()), config, embed=EMBED, synthetic_weight=1.0)
    half = build_dpo(LoadedEpisodes([*wins, *losses], Counter()), config, embed=EMBED)
    assert len(full.rows) == 4 and len(half.rows) == 2 and half.dropped["synthetic-weight"] == 2


# ---- which synthetic episodes are accepted ------------------------------------------------------


def test_replay_validated_synthetic_episodes_are_accepted_unless_curation_is_required():
    validated = synthetic(rooms("syn", 1)).record
    unchecked = synthetic(rooms("raw", 1), provenance=None).record
    failed = synthetic(rooms("bad", 1), VALIDATED | {"validation": {"replayed": True, "success": False}}).record
    assert exclusion_reason(validated, CONFIG) is None
    assert exclusion_reason(unchecked, CONFIG) == exclusion_reason(failed, CONFIG) == "synthetic-not-accepted"
    curated = CONFIG.model_copy(update={"synthetic": "curated"})
    assert exclusion_reason(validated, curated) == "synthetic-not-accepted"
    assert exclusion_reason(validated.model_copy(update={"tags": ["accepted"]}), curated) is None
    assert exclusion_reason(unchecked.model_copy(update={"tier": "golden"}), CONFIG) is None


# ---- through the bank and onto the card ---------------------------------------------------------


@pytest.fixture(scope="module")
def filled_home(tmp_path_factory) -> Path:
    return fill_bank(tmp_path_factory.mktemp("synthetic-sft") / ".crl")


def test_a_stored_stitch_is_trained_on_at_its_weight_and_the_card_says_so(filled_home, tmp_path):
    from crl.memory.synthesis.bank_io import store_synthetic
    from crl.memory.synthesis.provenance import Provenance, attach

    bank = open_bank(filled_home)
    try:
        real = bank.ls(kind="episode", outcome="success", variant="door")[0]
        stitched = bank.get(real.id).to_episode()
        stitched.episode_id, stitched.run_id, stitched.source, stitched.seed = (
            "syn-stitch-x",
            "synthesis",
            "synthetic",
            99,
        )
        for s in stitched.steps:
            s.observation = f"(replayed) {s.observation}"
        store_synthetic(
            bank, [attach(stitched, Provenance("stitch", [real.episode_id], validation=VALIDATED["validation"]))]
        )
        full = collect("sft", bank, CONFIG, synthetic_weight=1.0)
        card = build_dataset("sft", bank, CONFIG, tmp_path / "d", synthetic_weight=0.0)
    finally:
        bank.close()
    assert any(r["episode_id"] == "ep:keyroom:syn-stitch-x" for r in full.rows)
    assert full.stats["synthetic"]["synthetic"] == len(stitched.steps)
    assert card.filters["synthetic_weight"] == 0.0 and card.stats["synthetic"]["kept"] == 0
    assert "ep:keyroom:syn-stitch-x" not in card.source_episode_ids
    assert card.dropped["synthetic-weight"] == len(stitched.steps)
    readme = (tmp_path / "d" / "README.md").read_text()
    assert "## Synthetic experience" in readme and f"0 of {len(stitched.steps)} synthetic examples" in readme


def test_the_card_leaves_the_synthetic_section_out_when_there_is_none(tmp_path):
    from crl.finetune.sft_data import BuiltDataset

    row = {"prompt": [{"role": "user", "content": "U"}], "completion": [{"role": "assistant", "content": "Action: a"}]}
    share = weigh_synthetic([None], 0.5)[1].to_dict()
    write_dataset(tmp_path / "d", BuiltDataset("sft", [row | {"task": "k/v"}], stats={"synthetic": share}), {})
    assert "Synthetic experience" not in (tmp_path / "d" / "README.md").read_text()
