"""The benchmark stage log: finished stages are kept and reused, unfinished ones are played again."""

import json

import pytest

from bench.stage_log import StageLog


def test_a_rerun_reuses_finished_stages_and_plays_the_rest(tmp_path):
    path = tmp_path / "stages.jsonl"
    calls = []

    def work(value):
        def run():
            calls.append(value)
            return {"value": value}

        return run

    first = StageLog(path, echo=False)
    first.run("eval base", work(1), episodes=8)
    with pytest.raises(RuntimeError):
        first.run("train", lambda: (_ for _ in ()).throw(RuntimeError("killed")))

    second = StageLog(path, echo=False)
    reused = second.run("eval base", work(2), episodes=8)
    trained = second.run("train", work(3))

    assert calls == [1, 3]
    assert reused["value"] == 1 and reused["reused"] is True
    assert trained == {"stage": "train", "value": 3}
    assert [json.loads(line)["stage"] for line in path.read_text().splitlines()] == ["eval base", "train"]


def test_a_stage_asked_with_other_parameters_is_played_again(tmp_path):
    path = tmp_path / "stages.jsonl"
    StageLog(path, echo=False).run("eval base", lambda: {"successes": 0}, episodes=16)

    log = StageLog(path, echo=False)
    row = log.run("eval base", lambda: {"successes": 3}, episodes=48)

    assert row["successes"] == 3 and row["episodes"] == 48
    assert StageLog(path, echo=False).run("eval base", lambda: {"successes": 9}, episodes=48)["successes"] == 3


def test_a_skipped_stage_is_reported_but_not_kept(tmp_path):
    path = tmp_path / "stages.jsonl"
    log = StageLog(path, echo=False)
    log.skip("dpo dataset", error="no pairs")

    assert log.rows == [{"stage": "dpo dataset", "skipped": True, "error": "no pairs"}]
    assert not path.exists()
