"""No single source holds more than `finetune.max_source_share` of a dataset (`finetune.source_cap`).

Unit tests of the water-filling in whole examples (a property test over random source sizes), then
the real path: a curator-accepted import of many successes beside one small run of the home, built
into SFT data from the bank: the import is cut to its share, the same examples on every rebuild, and
the card says what was cut.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crl.agent.app import start_run
from crl.agent.llm.scripted import ScriptedModel
from crl.finetune.build import build_dataset
from crl.finetune.config import FinetuneConfig
from crl.finetune.source_cap import cap_sources
from tests.finetune_fixtures import fill_bank, open_bank, settings_for, solver_run


def units_of(sizes: dict[str, int]) -> list[tuple[str, str]]:
    return [(f"st:k:{source}-{i}:0", source) for source, n in sizes.items() for i in range(n)]


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.dictionaries(
        st.sampled_from(["run:a", "run:b", "import:x", "import:y", "synthesis:stitch"]), st.integers(1, 60), min_size=1
    ),
    share=st.floats(0.05, 1.0),
    scope=st.sampled_from(["untrusted", "all"]),
)
def test_no_capped_source_holds_more_than_its_share(sizes, share, scope):
    units = units_of(sizes)
    kept, cap = cap_sources(units, share, scope)
    after = Counter(units[i][1] for i in kept)
    applied = max(share, 1 / len(sizes))
    assert cap.applied == pytest.approx(applied, abs=1e-6)
    for source, n in sizes.items():
        if scope == "untrusted" and source.startswith("run:"):
            assert after[source] == n  # runs are exempt by default
        else:
            assert after[source] <= applied * sum(after.values()) + 1e-9
            assert after[source] >= 1  # a capped source is cut, never wiped out
    assert cap.dropped == len(units) - len(kept)
    assert cap.kept == {s: after[s] for s in sizes if after[s] < sizes[s]}


def test_the_share_applied_is_one_over_k_with_few_sources_and_a_bigger_share_keeps_a_superset():
    units = units_of({"import:x": 30, "run:a": 10})
    kept, cap = cap_sources(units, 0.34, "untrusted")
    assert cap.applied == 0.5 and cap.kept == {"import:x": 10}  # two sources: at most an even split
    whole, alone = cap_sources(units_of({"import:x": 30}), 0.34, "untrusted")
    assert len(whole) == 30 and alone.dropped == 0  # one source: nothing to balance it against
    three = units_of({"import:x": 30, "run:a": 10, "run:b": 10})
    small, _ = cap_sources(three, 0.34, "untrusted")
    large, _ = cap_sources(three, 0.45, "untrusted")
    assert set(small) < set(large) and len(small) == 20 + math.floor(0.34 * 30)
    assert cap_sources(three, 0.34, "untrusted")[0] == small  # deterministic
    with pytest.raises(ValueError, match="max_source_share"):
        cap_sources(units, 0.0, "untrusted")
    with pytest.raises(ValueError, match="capped_sources"):
        cap_sources(units, 0.5, "runs")


@pytest.fixture(scope="module")
def homes(tmp_path_factory) -> tuple[Path, Path]:
    """A home with two small runs of keyroom/key (successes and failures on two seeds) and an accepted
    import of another home's bank."""
    root = tmp_path_factory.mktemp("source-cap")
    other = fill_bank(root / "other")
    export = root / "export.jsonl"
    bank = open_bank(other)
    try:
        bank.export(export)
    finally:
        bank.close()
    home = root / "home"
    solver_run(home, "keyroom/key", 2, seed_start=20)  # seeds the import has not: no duplicate rows
    looking = ScriptedModel(lambda messages: " look")
    start_run(settings_for(home, parallel=2, max_steps=5), "keyroom/key", 2, seed_start=20, model=looking)
    bank = open_bank(home)
    try:
        bank.sync()
        report = bank.import_file(export)
        assert report.episodes > 2
        bank.review([r.id for r in bank.review_queue()], "accept")
    finally:
        bank.close()
    return home, export


def states_by_source(card_dir: Path, home: Path, runs_apart: bool = False) -> Counter:
    """SFT states per source: `run` (the home's runs; each its own with `runs_apart`) or `import`."""
    runs = [p.name for p in (home / "runs").iterdir()]
    rows = {r["step_id"]: r for r in map(json.loads, (card_dir / "data.jsonl").read_text().splitlines())}

    def source(row) -> str:
        run = next((run for run in runs if run in row["episode_id"]), None)
        return "import" if run is None else run if runs_apart else "run"

    return Counter(source(r) for r in rows.values())


def test_an_accepted_import_is_capped_in_sft_data_and_the_card_says_so(homes, tmp_path):
    home, _ = homes
    bank = open_bank(home)
    try:
        loose = FinetuneConfig(near_duplicate_similarity=None, max_source_share=1.0)
        capped = FinetuneConfig(near_duplicate_similarity=None)
        everything = FinetuneConfig(near_duplicate_similarity=None, capped_sources="all")
        free = build_dataset("sft", bank, loose, tmp_path / "free")
        card = build_dataset("sft", bank, capped, tmp_path / "capped")
        again = build_dataset("sft", bank, capped, tmp_path / "again")
        both = build_dataset("sft", bank, everything, tmp_path / "all")
    finally:
        bank.close()
    before, after = states_by_source(tmp_path / "free", home), states_by_source(tmp_path / "capped", home)
    assert before["import"] > before["run"] > 0  # the import would dominate the data
    assert "source-cap" not in free.dropped
    cap = card.stats["source_cap"]
    applied = max(0.34, 1 / len(cap["sources"]))
    assert cap["applied"] == pytest.approx(applied) and cap["scope"] == "untrusted"
    [source] = cap["kept"]
    assert source.startswith("import:imports/") and cap["kept"][source] == after["import"]
    assert after["run"] == before["run"]  # the home's runs are exempt
    assert after["import"] <= applied * sum(after.values())
    assert card.dropped["source-cap"] == before["import"] - after["import"] == cap["dropped"]
    assert card.filters["max_source_share"] == 0.34 and card.filters["capped_sources"] == "untrusted"
    assert again.sha256 == card.sha256  # the same examples on every rebuild
    assert "One source's share" in (tmp_path / "capped" / "README.md").read_text()
    # capping every source (the runs as well): no source, run or import, over the share applied
    split = states_by_source(tmp_path / "all", home, runs_apart=True)
    everyone = both.stats["source_cap"]
    assert everyone["scope"] == "all" and sum(1 for s in everyone["sources"] if s.startswith("run:")) >= 1
    assert max(split.values()) <= everyone["applied"] * sum(split.values())


def test_dpo_pairs_count_for_their_less_trusted_side(homes, tmp_path):
    home, _ = homes
    bank = open_bank(home)
    try:
        free = build_dataset("dpo", bank, FinetuneConfig(max_source_share=1.0), tmp_path / "free")
        card = build_dataset("dpo", bank, FinetuneConfig(), tmp_path / "capped")
    finally:
        bank.close()
    cap = card.stats["source_cap"]
    assert free.examples > card.examples and cap["dropped"] == free.examples - card.examples
    assert all(s.startswith("import:") for s in cap["kept"])
