"""Episode logs that a kill or a disk error damaged never stop the bank (issue 17, defects 2 and 7).

A torn tail cut inside a multi-byte character, and a corrupt line in the middle, are skipped by
readers with a warning naming the file and line; the writer cuts the tail and moves bad lines to
`<log>.bad` when it reopens the log; `crl runs`, `show`, `memory rebuild` and `run --resume`
keep working; a resumed episode is finished in the bank at once, without a second rebuild.
Real files, a real embedded Chroma bank (hashing embedding), the CLI through typer's runner.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

import crl.agent.app
from crl.agent.cli.main import app
from crl.agent.llm.scripted import ScriptedModel
from crl.memory.storage.embeddings import HashingEmbedding, SentenceTransformerEmbedding
from crl.memory.storage.episode_log import EpisodeLog, iter_events, read_episodes
from crl.tasks.keyroom import solve
from crl.tasks.registry import fold_seeds
from tests.chroma_server import make_episode, write_log
from tests.retrieval_fixtures import open_test_bank

TORN = '{"event": "step", "episode_id": "r1-0001", "observation": "café'.encode()[:-1]  # cut inside "é"


def accented(run_id: str, i: int, success: bool, finished: bool = True):
    ep = make_episode(run_id, i, success=success, finished=finished)
    for step in ep.steps:
        step.observation += " Un café crème, s'il vous plaît."
    return ep


def test_a_torn_multibyte_tail_is_skipped_by_readers_and_cut_by_the_writer(tmp_path):
    path = write_log(tmp_path, "r1", [accented("r1", 0, True), accented("r1", 1, False, finished=False)])
    clean = path.read_bytes()
    path.write_bytes(clean + TORN)
    with pytest.raises(UnicodeDecodeError):
        path.read_text(encoding="utf-8")
    episodes = read_episodes(path)
    assert [len(e.steps) for e in episodes] == [4, 4] and episodes[0].finished and not episodes[1].finished
    assert "café" in episodes[0].steps[0].observation
    log = EpisodeLog(path)
    log.close()
    assert log.repaired_bytes == len(TORN) and path.read_bytes() == clean


def test_a_corrupt_middle_line_is_skipped_with_a_warning_then_moved_to_a_sidecar(tmp_path, caplog):
    path = write_log(tmp_path, "r1", [accented("r1", 0, True), accented("r1", 1, False)])
    lines = path.read_bytes().splitlines(keepends=True)
    bad = b'{"event": "step", "episode_id": "r1-0000", "observation": "\xff\xfe broken\n'
    lines[2] = bad
    path.write_bytes(b"".join(lines) + TORN)
    problems: list[str] = []
    with caplog.at_level(logging.WARNING, logger="crl.memory.storage.episode_log"):
        episodes = read_episodes(path, problems)
    at = bad.index(b"\xff")
    assert problems == [f"{path}:3: skipped a corrupt episode-log line (not UTF-8 (invalid start byte at byte {at}))"]
    assert f"{path}:3:" in caplog.text
    assert [len(e.steps) for e in episodes] == [3, 4]  # the bad line's step is gone, nothing else

    log = EpisodeLog(path)
    log.close()
    assert log.repair.quarantined == [3] and log.repair.cut_bytes == len(TORN)
    assert Path(str(path) + ".bad").read_bytes() == bad
    assert b"\xff" not in path.read_bytes()
    again: list[str] = []
    assert [len(e.steps) for e in read_episodes(path, again)] == [3, 4] and again == []


def test_events_that_do_not_fit_are_skipped_and_a_whole_last_event_keeps_its_place(tmp_path):
    path = write_log(tmp_path, "r1", [accented("r1", 0, True)])
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(1, b'{"event": "step", "episode_id": "r1-0000", "index": "one", "bogus": 1}\n')
    lines.insert(1, b'["not", "an", "event"]\n')
    data = b"".join(lines)
    path.write_bytes(data[:-1])  # the end event lost only its newline
    problems: list[str] = []
    (episode,) = read_episodes(path, problems)
    assert episode.finished and len(episode.steps) == 4
    assert [p.split(": ", 1)[0] for p in problems] == [f"{path}:2", f"{path}:3"]
    EpisodeLog(path).close()
    assert path.read_bytes().endswith(b"}\n") and read_episodes(path)[0].finished
    assert [e["event"] for e in iter_events(path)].count("end") == 1


def test_sync_ingests_every_readable_episode_of_damaged_logs(tmp_path):
    runs = tmp_path / "runs"
    one = write_log(runs, "r1", [accented("r1", 0, True), accented("r1", 1, False, finished=False)])
    one.write_bytes(one.read_bytes() + TORN)
    two = write_log(runs, "r2", [accented("r2", 0, False)])
    lines = two.read_bytes().splitlines(keepends=True)
    lines[3] = b"{garbage\n"
    two.write_bytes(b"".join(lines))
    bank = open_test_bank(tmp_path)
    try:
        report = bank.sync()
        assert report.errors == [] and report.episodes_ingested == 3
        assert {r.episode_id: r.outcome for r in bank.ls()} == {
            "r1-0000": "success",
            "r1-0001": "unfinished",
            "r2-0000": "failure",
        }
        assert bank.get("r2-0000").length == 3
    finally:
        bank.close()


def cli(home: Path, *args) -> object:
    result = CliRunner().invoke(app, ["--home", str(home), *map(str, args)])
    assert "Traceback" not in result.output
    return result


def outcomes(home: Path) -> dict[str, tuple[str, int]]:
    r = cli(home, "memory", "ls", "--json")
    assert r.exit_code == 0, r.output
    return {e["episode_id"]: (e["outcome"], e["length"]) for e in json.loads(r.stdout)}


@pytest.fixture
def home(crl_home, monkeypatch):
    monkeypatch.setattr(
        SentenceTransformerEmbedding, "from_config", classmethod(lambda cls, config: HashingEmbedding(64))
    )
    return crl_home


def test_cli_survives_a_torn_tail_and_a_corrupt_line_and_resume_finishes_the_episode_at_once(home, monkeypatch):
    """Killed in the middle of episode 2's fourth step (cut inside a multi-byte character), with a
    corrupt line in episode 1: every command works, and the resumed episode is finished in the bank
    right after `--resume`, without another rebuild."""
    seeds = fold_seeds("keyroom/compound", "train", 2)
    first, actions = solve(seeds[0], "compound"), solve(seeds[1], "compound")
    monkeypatch.setattr(crl.agent.app, "build_chat_model", lambda s: ScriptedModel([f" {a}" for a in first + actions]))
    r = cli(home, "run", "keyroom/compound", "-n", 2, "--parallel", 1, "--policy", "llm")
    assert r.exit_code == 0, r.output
    (run_dir,) = (home / "runs").iterdir()
    log = run_dir / "episodes.jsonl"
    events = [json.loads(line) for line in log.read_bytes().splitlines()]
    lines = log.read_bytes().splitlines(keepends=True)
    second = f"{run_dir.name}-0001"
    keep = [line for line, e in zip(lines, events) if e["episode_id"] != second]
    keep += [line for line, e in zip(lines, events) if e["episode_id"] == second][:4]
    keep[2] = b'{"event": "step", "episode_id": "\xe9t\xe9\n'
    log.write_bytes(b"".join(keep) + TORN)
    info = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps(info | {"status": "running"}))
    for name in ("journal.jsonl", "view_state.json", "sync_state.json"):
        (home / "memory" / name).unlink(missing_ok=True)

    assert cli(home, "runs").exit_code == 0
    r = cli(home, "show", run_dir.name)
    assert r.exit_code == 0 and "Traceback" not in r.output
    r = cli(home, "memory", "sync")
    assert r.exit_code == 0, r.output
    assert outcomes(home)[second] == ("unfinished", 3)
    assert cli(home, "memory", "rebuild").exit_code == 0

    monkeypatch.setattr(crl.agent.app, "build_chat_model", lambda s: ScriptedModel([f" {a}" for a in actions[3:]]))
    r = cli(home, "run", "keyroom/compound", "--resume", run_dir.name, "--policy", "llm")
    assert r.exit_code == 0, r.output
    assert Path(str(log) + ".bad").exists()
    assert outcomes(home)[second] == ("success", len(actions))
    r = cli(home, "memory", "rebuild")
    assert r.exit_code == 0 and outcomes(home)[second] == ("success", len(actions))


def test_an_episode_stored_finished_stays_finished_when_its_log_loses_the_end(home, monkeypatch):
    """The end event torn off after the episode was stored (defect 7): a rebuild keeps the journalled
    outcome, and `--resume` leaves it finished."""
    (seed,) = fold_seeds("keyroom/compound", "train", 1)
    actions = solve(seed, "compound")
    monkeypatch.setattr(crl.agent.app, "build_chat_model", lambda s: ScriptedModel([f" {a}" for a in actions]))
    assert cli(home, "run", "keyroom/compound", "-n", 1, "--parallel", 1, "--policy", "llm").exit_code == 0
    (run_dir,) = (home / "runs").iterdir()
    log = run_dir / "episodes.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    log.write_bytes(b"".join(lines[:-1]) + lines[-1][:40] + "é".encode()[:1])
    eid = f"{run_dir.name}-0000"
    assert cli(home, "memory", "rebuild").exit_code == 0
    assert outcomes(home)[eid] == ("success", len(actions))
    monkeypatch.setattr(crl.agent.app, "build_chat_model", lambda s: ScriptedModel([" look"] * 50))
    assert cli(home, "run", "keyroom/compound", "--resume", run_dir.name, "--policy", "llm").exit_code == 0
    assert outcomes(home)[eid] == ("success", len(actions))
    assert [e["event"] for e in iter_events(log)].count("end") == 1
