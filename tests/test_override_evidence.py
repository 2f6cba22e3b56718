"""The override diagnostic splits seeds by paired outcome and names the evidence behind each override."""

from __future__ import annotations

import json

from bench.override_evidence import compare_overrides, evidence_kind


def _decision(chosen_n: int, model_n: int | None, changed: bool = True) -> dict:
    actions = {"go west": {"model": 0.3, "memory": {"n": chosen_n}}, "go east": {"model": 0.7}}
    if model_n is not None:
        actions["go east"]["memory"] = {"n": model_n}
    return {
        "chosen": "go west" if changed else "go east",
        "model_best": "go east",
        "memory_changed_argmax": changed,
        "actions": actions,
    }


def _log(path, games: dict[int, tuple[bool, list[dict | None]]]) -> None:
    lines = []
    for seed, (success, decisions) in games.items():
        eid = f"r-{seed}"
        lines.append({"event": "start", "episode_id": eid, "run_id": "r", "task": "t", "seed": seed, "goal": "g"})
        for i, d in enumerate(decisions):
            extra = {"policy": {"decided_by": "memory", "posterior": d}} if d else {}
            lines.append(
                {"event": "step", "episode_id": eid, "index": i, "observation": "o", "action": "a", "extra": extra}
            )
        lines.append({"event": "end", "episode_id": eid, "status": "done", "success": success})
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_evidence_kinds():
    assert evidence_kind(_decision(0, 5)) == "untried"
    assert evidence_kind(_decision(4, 1)) == "thin"
    assert evidence_kind(_decision(4, None)) == "other"
    assert evidence_kind(_decision(3, 3)) == "supported"
    assert evidence_kind(_decision(2, 5)) == "other"


def test_overrides_are_counted_by_paired_outcome(tmp_path):
    with_memory, alone = tmp_path / "mem.jsonl", tmp_path / "alone.jsonl"
    _log(
        with_memory,
        {
            1: (True, [_decision(0, 2), None]),
            2: (False, [_decision(3, 4), _decision(5, 3), _decision(3, 3, changed=False)]),
            3: (True, [None]),
            4: (False, [_decision(2, 1)]),
            5: (True, []),
        },
    )
    _log(alone, {1: (False, []), 2: (True, []), 3: (True, []), 4: (False, [])})
    result = compare_overrides(with_memory, alone)
    groups = result["groups"]
    assert result["paired_seeds"] == 4
    assert groups["memory won, alone lost"] == {
        "seeds": 1,
        "seeds_with_override": 1,
        "overrides": {"untried": 1},
        "model_p_median": 0.7,
    }
    assert groups["memory lost, alone won"]["overrides"] == {"supported": 2}
    assert groups["memory lost, alone won"]["seeds_with_override"] == 1
    assert groups["both won"] == {"seeds": 1, "seeds_with_override": 0, "overrides": {}, "model_p_median": None}
    assert groups["both lost"]["overrides"] == {"thin": 1}
