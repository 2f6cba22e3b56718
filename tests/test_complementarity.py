"""The complementarity report pairs each adapter's arms on the same seeds and bank."""

from __future__ import annotations

import json

import pytest

from bench.complementarity import compare, eval_rows


def _row(stage, wins):
    outcomes = {str(seed): bool(w) for seed, w in enumerate(wins)}
    return {"stage": stage, "successes": sum(wins), "episodes": len(wins), "outcomes": outcomes}


def test_adapter_with_memory_is_compared_with_both_arms_on_the_matching_bank(tmp_path):
    n = 40
    rows = [
        _row("eval base memory=False", [0] * n),
        _row("eval base memory=True", [1] * 10 + [0] * 30),
        _row("eval sft 1 memory=False", [1] * 12 + [0] * 28),
        _row("eval sft 1 memory=True", [1] * 30 + [0] * 10),
        _row("eval base round 2 memory=True", [1] * 35 + [0] * 5),
        _row("eval sft 2 memory=False", [1] * 20 + [0] * 20),
        _row("eval sft 2 memory=True", [1] * 30 + [0] * 10),
        {"stage": "sft 1 train", "adapter": "a1"},
    ]
    log = tmp_path / "expert-iteration.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    found = {c["adapter"]: c for c in compare(eval_rows(log))}
    assert set(found) == {"sft 1", "sft 2"}
    first = found["sft 1"]
    assert first["base_memory"]["stage"] == "eval base memory=True"
    assert first["vs_adapter_alone"]["a_only"] == 18 and first["vs_adapter_alone"]["b_only"] == 0
    assert first["margin_over_best"] == pytest.approx(0.45)
    assert first["complementary"] is True
    second = found["sft 2"]
    assert second["base_memory"]["stage"] == "eval base round 2 memory=True"
    assert second["vs_base_memory"]["b_only"] == 5
    assert second["complementary"] is False


def test_with_games_a_margin_carried_by_one_repeated_game_is_not_complementary(tmp_path):
    n = 40
    rows = {
        "eval base memory=True": _row("eval base memory=True", [0] * 6 + [1] * 4 + [0] * 30),
        "eval sft 1 memory=False": _row("eval sft 1 memory=False", [0] * 6 + [1] * 4 + [0] * 30),
        "eval sft 1 memory=True": _row("eval sft 1 memory=True", [1] * 6 + [1] * 4 + [0] * 30),
    }
    assert all(len(r["outcomes"]) == n for r in rows.values())
    [by_seed] = compare(rows)
    assert by_seed["complementary"] is True and by_seed["vs_base_memory"]["a_only"] == 6
    games = {str(s): "living room" for s in range(6)} | {str(s): f"g{s}" for s in range(6, n)}
    [by_game] = compare(rows, games)
    assert by_game["vs_base_memory"]["games"] == 35
    assert (by_game["vs_base_memory"]["games_a_only"], by_game["vs_base_memory"]["games_b_only"]) == (1, 0)
    assert by_game["games_margin_over_best"] == pytest.approx(1 / 35)
    assert by_game["complementary"] is False
    assert by_game["vs_base_memory"]["p_greater"] < 0.05 < by_game["vs_base_memory"]["games_p_greater"]
