"""Imports are untrusted input (issue 17, defects 1 and 3, and the trust model): names the bank
cannot store and inconsistent records are refused before anything is journalled; a home whose
journal already holds such an import still opens; imported records wait in quarantine,
unverified, for `crl memory review`; a record the bank made from its own runs is never replaced.

Real embedded Chroma banks with the hashing embedding; the CLI through typer's runner.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from crl.agent.cli.main import app
from crl.memory.records import SCHEMA_VERSION, counts_as_success
from crl.memory.storage.embeddings import HashingEmbedding, SentenceTransformerEmbedding
from crl.memory.storage.journal import Journal, JournalEntry
from crl.memory.storage.transfer import MIGRATIONS, ImportValidationError, read_import
from crl.memory.synthesis.provenance import Provenance, attach
from tests.chroma_server import make_episode, write_log
from tests.retrieval_fixtures import open_test_bank


def exported(tmp_path: Path, name: str = "src") -> list[dict]:
    """The export lines (as dicts) of a bank holding one success and one failure of keyroom/key."""
    bank = open_test_bank(tmp_path / name)
    try:
        bank.ingest_episode(make_episode("r1", 0, success=True))
        bank.ingest_episode(make_episode("r1", 1, success=False))
        bank.add_rule("Take the key before the door.", scope="keyroom")
        path = tmp_path / f"{name}.jsonl"
        bank.export(path)
    finally:
        bank.close()
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_lines(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def episode_row(rows: list[dict], success: bool) -> dict:
    return next(r for r in rows if r["kind"] == "episode" and r["success"] is success)


def journal_ops(bank) -> list[str]:
    entries, _ = bank.journal.read(0)
    return [e.op for e in entries]


def forged(rows: list[dict], **changes) -> list[dict]:
    """The rows with the successful episode changed."""
    out = [dict(r) for r in rows]
    target = episode_row(out, True)
    target.update(changes)
    return out


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"family": "x..y", "id": "ep:x..y:r1-0000"}, "task family 'x..y'"),
        ({"success": False}, "disagrees with success=false"),
        ({"total_return": -5.0}, "total_return -5.0 but the trajectory's rewards sum to 1.0"),
        ({"length": 999}, "length 999 but the trajectory has 4 step(s)"),
        ({"value": 1e9}, "value 1000000000.0 is outside [0, 1]"),
        ({"task": "twx/coin"}, "task 'twx/coin' is not of family 'keyroom'"),
        ({"outcome": "unfinished", "success": False}, "disagrees with status 'done'"),
        ({"episode_id": "r1:0000", "id": "ep:keyroom:r1:0000"}, "episode_id 'r1:0000'"),
    ],
)
def test_inconsistent_or_unstorable_imports_are_refused_before_anything_is_journalled(tmp_path, changes, message):
    rows = forged(exported(tmp_path), **changes)
    bad = write_lines(tmp_path / "bad.jsonl", rows)
    bank = open_test_bank(tmp_path / "home")
    try:
        with pytest.raises(ImportValidationError) as caught:
            bank.import_file(bad)
        line = rows.index(episode_row(rows, changes.get("success", True))) + 1 if "success" not in changes else None
        assert message in str(caught.value) and "nothing imported" in str(caught.value)
        if line is not None:
            assert f"line {line}:" in str(caught.value)
        assert "import" not in journal_ops(bank) and bank.ls() == []
        assert not (bank.dir / "imports").exists() or not list((bank.dir / "imports").iterdir())
    finally:
        bank.close()


def test_a_step_that_disagrees_with_its_episode_is_refused(tmp_path):
    rows = exported(tmp_path)
    step = next(r for r in rows if r["kind"] == "step" and r["episode_outcome"] == "failure")
    step["episode_outcome"] = "success"
    with pytest.raises(ImportValidationError, match="episode_outcome 'success' differs from its episode's 'failure'"):
        read_import(write_lines(tmp_path / "bad.jsonl", rows), 1 << 20, 1 << 16)


def test_a_home_whose_journal_holds_an_unstorable_import_still_opens_and_reports_the_line(tmp_path):
    """An import journalled by an older crl (no name checks): family `x..y`, which Chroma refuses."""
    rows = exported(tmp_path)
    bank = open_test_bank(tmp_path / "home")
    write_log(tmp_path / "home" / "runs", "r9", [make_episode("r9", 0, success=True)])
    bank.sync()
    bank.close()
    before_import = time.time()
    time.sleep(0.02)
    bad_rows = [r for r in rows if r["kind"] == "episode" and r["success"]]
    bad_rows = [dict(bad_rows[0], family="x..y", id="ep:x..y:r1-0000", schema_version=1)]
    for r in bad_rows:
        for key in ("verified", "verified_by", "imported_from", "review", "namespace"):
            r.pop(key, None)
    memory = tmp_path / "home" / "memory"
    (memory / "imports").mkdir(exist_ok=True)
    write_lines(memory / "imports" / "old.jsonl", bad_rows)
    journal = Journal(memory / "journal.jsonl", fsync=False)
    with journal.locked():
        journal.append([JournalEntry("import", ["ep:x..y:r1-0000"], {"file": "imports/old.jsonl", "count": 1}, "old")])
    lines = (memory / "journal.jsonl").read_text().splitlines()
    assert json.loads(lines[-1])["op"] == "import"

    bank = open_test_bank(tmp_path / "home")
    try:
        assert any(f"journal line {len(lines)} (import)" in w and "x..y" in w for w in bank.warnings), bank.warnings
        assert [r.id for r in bank.ls()] == ["ep:keyroom:r9-0000"]
        assert bank.stats().episodes == 1
        report = bank.rebuild(as_of=before_import)
        assert report.episodes == 1
        report = bank.rebuild()
        assert report.episodes == 1
    finally:
        bank.close()


def test_a_corrupt_journal_line_is_skipped_with_its_line_number(tmp_path):
    bank = open_test_bank(tmp_path)
    bank.ingest_episode(make_episode("r1", 0, success=True))
    bank.tag("r1-0000", "kept")
    bank.close()
    path = tmp_path / "memory" / "journal.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(2, b'{"op": "tag", "ids": \xff\n')
    path.write_bytes(b"".join(lines))
    bank = open_test_bank(tmp_path)
    try:
        assert any("line 3: skipped a corrupt journal entry" in w for w in bank.warnings), bank.warnings
        assert bank.get("r1-0000").tags == ["kept"]
    finally:
        bank.close()


def test_imports_wait_in_quarantine_unverified_and_never_replace_a_real_record(tmp_path):
    rows = exported(tmp_path)
    bank = open_test_bank(tmp_path / "home")
    try:
        real = make_episode("r1", 1, success=False)
        bank.ingest_episode(real)
        before = bank.get("r1-0001")
        assert before.verified and before.verified_by == "env" and before.imported_from is None
        # the same episode, forged into a golden success with its trajectory made consistent
        failed = episode_row(rows, False)
        lie = dict(failed, tier="golden", outcome="success", success=True, status="done", total_return=1.0)
        lie["trajectory"] = [dict(s) for s in failed["trajectory"]]
        lie["trajectory"][-1]["reward"] = 1.0
        others = [r for r in rows if r is not failed and r.get("episode_id") != failed["episode_id"]]
        report = bank.import_file(write_lines(tmp_path / "lie.jsonl", others + [lie]))
        assert report.kept_existing == ["ep:keyroom:r1-0001"]
        after = bank.get("r1-0001")
        assert (after.outcome, after.tier, after.source, after.verified) == ("failure", "regular", "real", True)
        assert after.imported_from is None
        assert [s.episode_outcome for s in bank.ls(kind="step") if s.episode_id == "r1-0001"] == ["failure"] * 4

        imported = bank.get("r1-0000")
        assert imported.outcome == "success" and imported.tier == "quarantine" and imported.review == "pending"
        assert not imported.verified and imported.imported_from.startswith("imports/")
        assert not counts_as_success(imported)
        steps = [s for s in bank.ls(kind="step") if s.episode_id == "r1-0000"]
        assert steps and all(s.tier == "quarantine" and not counts_as_success(s) for s in steps)
        assert bank.query_steps("keyroom", [steps[0].text], k=10, where_outcome="success") == [[]]
        rule = next(r for r in bank.rules(include_quarantine=True))
        assert rule.review == "pending" and bank.rules() == []
        queue = {r.id for r in bank.review_queue()}
        assert queue == {"ep:keyroom:r1-0000", rule.id}

        # a rebuild replays the same decisions
        bank.rebuild()
        assert bank.get("r1-0001").outcome == "failure" and bank.get("r1-0000").review == "pending"
    finally:
        bank.close()


def test_review_accepts_rejects_and_edits_and_journals_each_decision(tmp_path):
    rows = exported(tmp_path)
    bank = open_test_bank(tmp_path / "home")
    try:
        bank.import_file(write_lines(tmp_path / "in.jsonl", rows))
        rule_id = next(r.id for r in bank.review_queue() if r.kind == "rule")
        bank.review("r1-0000", "edit", tags=["checked"], value=0.9, note="looks right")
        edited = bank.get("r1-0000")
        assert edited.tags == ["checked"] and edited.value == 0.9 and edited.review == "pending"
        bank.review("r1-0000", "accept", actor="curator-ann")
        ok = bank.get("r1-0000")
        assert ok.tier == "regular" and ok.review == "accepted" and ok.verified
        assert ok.verified_by == "curator:curator-ann" and counts_as_success(ok)
        steps = [s for s in bank.ls(kind="step") if s.episode_id == "r1-0000"]
        assert all(s.tier == "regular" and s.verified for s in steps)
        assert bank.query_steps("keyroom", [steps[0].text], k=1, where_outcome="success")[0][0].id == steps[0].id
        bank.review(rule_id, "edit", text="Always take the key first.")
        bank.review([rule_id, "r1-0001"], "reject", note="forged")
        assert bank.get("r1-0001").review == "rejected" and bank.get("r1-0001").tier == "quarantine"
        assert bank.rules() == [] and bank.get(rule_id).text == "Always take the key first."
        assert bank.review_queue() == []
        decisions = [
            (h.entry.payload["decision"], h.entry.actor) for h in bank.history("r1-0000") if h.entry.op == "review"
        ]
        assert decisions == [("edit", "test"), ("accept", "curator-ann")]
        assert [h.entry.payload.get("note") for h in bank.history("r1-0001") if h.entry.op == "review"] == ["forged"]
        bank.rebuild()
        assert bank.get("r1-0000").verified_by == "curator:curator-ann" and bank.get("r1-0001").review == "rejected"
        with pytest.raises(ValueError, match="accept, reject or edit"):
            bank.review("r1-0000", "approve")
    finally:
        bank.close()


def test_counts_as_success_needs_a_verified_outcome(tmp_path):
    bank = open_test_bank(tmp_path)
    try:
        bank.ingest_episode(make_episode("r1", 0, success=True))
        bank.ingest_episode(make_episode("r1", 1, success=False))
        unvalidated = make_episode("syn", 2, success=True)
        unvalidated.source = "synthetic"
        validated = make_episode("syn", 3, success=True)
        validated.source = "synthetic"
        attach(validated, Provenance("stitch", ["r1-0000"], validation={"replayed": True, "success": True}))
        bank.ingest_episode(unvalidated)
        bank.ingest_episode(validated)
        assert counts_as_success(bank.get("r1-0000")) and not counts_as_success(bank.get("r1-0001"))
        assert not counts_as_success(bank.get("syn-0002")) and not bank.get("syn-0002").verified
        assert counts_as_success(bank.get("syn-0003")) and bank.get("syn-0003").verified_by == "replay"
        bank.quarantine("r1-0000")
        assert not counts_as_success(bank.get("r1-0000"))
        assert not counts_as_success(bank.rules()[0]) if bank.rules() else True
    finally:
        bank.close()


def test_schema_v1_records_migrate_with_their_trust(tmp_path):
    rows = exported(tmp_path)
    assert SCHEMA_VERSION == 2 and 1 in MIGRATIONS
    old = []
    for r in rows:
        r = {k: v for k, v in r.items() if k not in ("verified", "verified_by", "imported_from", "review", "namespace")}
        old.append(r | {"schema_version": 1})
    records = read_import(write_lines(tmp_path / "v1.jsonl", old), 1 << 20, 1 << 16)
    episodes = [r for r in records if r.kind == "episode"]
    assert episodes and all(r.verified and r.verified_by == "env" for r in episodes)


@pytest.fixture
def cli_home(crl_home, monkeypatch):
    monkeypatch.setattr(
        SentenceTransformerEmbedding, "from_config", classmethod(lambda cls, config: HashingEmbedding(64))
    )
    return crl_home


def crl(*args, input: str | None = None) -> object:
    return CliRunner().invoke(app, [str(a) for a in args], input=input)


def test_cli_import_then_review_by_flags_and_by_prompt(cli_home, tmp_path):
    rows = exported(tmp_path)
    src = write_lines(tmp_path / "in.jsonl", rows)
    r = crl("memory", "import", src)
    assert r.exit_code == 0, r.output
    assert "wait for `crl memory review`" in r.output
    r = crl("memory", "review", "--json")
    queue = json.loads(r.stdout)
    assert {q["kind"] for q in queue} == {"episode", "rule"} and all(q["review"] == "pending" for q in queue)
    r = crl("memory", "review")
    assert r.exit_code == 0 and "to review" in r.output and "ep:keyroom:r1-0000" in r.output

    r = crl("memory", "review", "--accept", "r1-0000", "--pin", "--note", "replayed by hand", "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == {"decisions": [{"id": "ep:keyroom:r1-0000", "decision": "accept"}], "queued": 2}
    shown = json.loads(crl("memory", "show", "r1-0000", "--json").stdout)
    assert shown["tier"] == "golden" and shown["verified"] and shown["verified_by"].startswith("curator:")

    r = crl("memory", "review", "--interactive", input="e\nodd, later\nr\nq\n")
    assert r.exit_code == 0, r.output
    assert "2 decision(s); 1 record(s) still queued" in r.output
    left = json.loads(crl("memory", "review", "--json").stdout)
    assert [q["kind"] for q in left] == ["rule"]
    record = json.loads(crl("memory", "show", "r1-0001", "--json").stdout)
    assert record["review"] == "rejected" and record["tags"] == ["later", "odd"]

    r = crl("memory", "review", "--edit", left[0]["id"])
    assert r.exit_code == 1 and "an edit needs" in r.output and "Traceback" not in r.output

    rows[0] = dict(rows[0], family="x..y")
    r = crl("memory", "import", write_lines(tmp_path / "bad.jsonl", rows))
    assert r.exit_code == 1 and "line 1:" in r.output and "x..y" in r.output and "Traceback" not in r.output
    assert crl("memory", "stats").exit_code == 0


def test_rebuild_drops_everything_one_run_or_one_import_brought(tmp_path):
    runs = tmp_path / "home" / "runs"
    write_log(runs, "r1", [make_episode("r1", i, success=i == 0) for i in range(2)])
    write_log(runs, "r2", [make_episode("r2", 0, success=True, words="A poisoned hall.")])
    other = [dict(r) for r in exported(tmp_path)]
    for r in other:  # the same records under other ids: an import of foreign episodes
        if r["kind"] != "rule":
            r["episode_id"] = r["episode_id"].replace("r1-", "x1-")
            r["run_id"] = "x1"
            r["id"] = r["id"].replace(":r1-", ":x1-")
    src = write_lines(tmp_path / "foreign.jsonl", other)
    bank = open_test_bank(tmp_path / "home")
    try:
        bank.sync()
        bank.credit(["st:keyroom:r1-0000:0"], success=True, actor="run:r2")
        rule = bank.add_rule("Always go north first.", scope="keyroom", actor="run:r2")
        bank.import_file(src)
        assert len(bank.ls()) == 5 and bank.get("st:keyroom:r1-0000:0").use_count == 1

        report = bank.rebuild(drop_runs=["r2"])
        assert report.dropped == 3  # r2's ingest, its credit and its rule
        assert sorted(r.episode_id for r in bank.ls()) == ["r1-0000", "r1-0001", "x1-0000", "x1-0001"]
        assert bank.get("st:keyroom:r1-0000:0").use_count == 0
        assert rule not in {r.id for r in bank.rules(include_quarantine=True)}
        again = bank.sync(runs)
        assert again.episodes_ingested == 0 and "r2-0000" not in {r.episode_id for r in bank.ls()}

        report = bank.rebuild(drop_imports=[str(src)])
        assert report.dropped == 1 and sorted(r.episode_id for r in bank.ls()) == ["r1-0000", "r1-0001"]
        assert bank.review_queue() == []
        with pytest.raises(ValueError, match="was dropped"):
            bank.import_file(src)
        with pytest.raises(ValueError, match="left nothing in this memory's journal"):
            bank.rebuild(drop_runs=["nosuch"])
        with pytest.raises(ValueError, match="no import"):
            bank.rebuild(drop_imports=["imports/0000.jsonl"])
    finally:
        bank.close()
    reopened = open_test_bank(tmp_path / "home")
    try:
        assert sorted(r.episode_id for r in reopened.ls()) == ["r1-0000", "r1-0001"]
        items = [(h.entry.op, h.entry.actor, h.cancelled) for h in reopened.history("st:keyroom:r1-0000:0")]
        assert items == [("ingest", "test", False), ("credit", "run:r2", True)]
    finally:
        reopened.close()


def test_cli_rebuild_drop_run_asks_first(cli_home, tmp_path):
    write_log(cli_home / "runs", "r7", [make_episode("r7", 0, success=True)])
    assert crl("memory", "sync").exit_code == 0
    r = crl("memory", "rebuild", "--drop-run", "r7")
    assert r.exit_code == 1 and "--yes" in r.output
    r = crl("memory", "rebuild", "--drop-run", "r7", "--yes")
    assert r.exit_code == 0 and "1 journal entries dropped" in r.output and "0 episodes" in r.output
    r = crl("memory", "rebuild", "--drop-run", "r8", "--yes")
    assert r.exit_code == 1 and "r8" in r.output and "Traceback" not in r.output


def test_a_rule_added_for_review_waits_in_quarantine_until_accepted(tmp_path):
    bank = open_test_bank(tmp_path)
    try:
        rid = bank.add_rule("Drop the key at the door.", scope="keyroom", pending_review=True)
        assert bank.rules() == [] and [r.id for r in bank.review_queue()] == [rid]
        assert bank.query_rules(["Drop the key"], scope="keyroom") == [[]]
        bank.review(rid, "accept")
        assert [r.id for r in bank.rules()] == [rid] and bank.review_queue() == []
    finally:
        bank.close()


def test_an_episode_of_an_unstorable_family_is_refused_before_it_is_journalled(tmp_path):
    bank = open_test_bank(tmp_path)
    try:
        with pytest.raises(ValueError, match="task family 'x..y'"):
            bank.ingest_episode(make_episode("r1", 0, success=True, task="x..y/key"))
        assert journal_ops(bank) == [] and bank.stats().episodes == 0
    finally:
        bank.close()


def test_a_played_episode_takes_the_place_of_an_imported_copy(tmp_path):
    rows = exported(tmp_path)
    home = tmp_path / "home"
    bank = open_test_bank(home)
    try:
        bank.import_file(write_lines(tmp_path / "in.jsonl", rows))
        assert bank.get("r1-0000").review == "pending"
        write_log(home / "runs", "r1", [make_episode("r1", 0, success=True)])
        assert bank.sync().episodes_ingested == 1
        for _ in range(2):  # as ingested, then as rebuilt
            played = bank.get("r1-0000")
            assert played.verified and played.imported_from is None and played.tier == "regular"
            copies = [r for r in bank.ls(kind="step") if r.episode_id == "r1-0000"]
            assert len(copies) == 4 and all(s.verified and s.review is None for s in copies)
            assert "ep:keyroom:r1-0000" not in {r.id for r in bank.review_queue()}
            bank.rebuild()
    finally:
        bank.close()


_FIELD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=12),
    st.lists(st.integers(), max_size=3),
)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_imports_are_refused_with_a_line_or_stored_consistent(tmp_path_factory, data):
    """Random changes to random fields of an export: either every record stored is consistent and
    waits for review, or the import is refused naming a line and the bank is unchanged."""
    root = tmp_path_factory.mktemp("fuzz")
    rows = FUZZ_ROWS.setdefault("rows", exported(tmp_path_factory.mktemp("src")))
    rows = [dict(r) for r in rows]
    for _ in range(data.draw(st.integers(1, 3), label="changes")):
        row = data.draw(st.sampled_from(rows), label="row")
        key = data.draw(st.sampled_from(sorted(row)), label="field")
        row[key] = data.draw(_FIELD_VALUES, label="value")
    path = write_lines(root / "fuzz.jsonl", rows)
    bank = open_test_bank(root / "home")
    try:
        try:
            report = bank.import_file(path)
        except ImportValidationError as e:
            assert "line " in str(e) and "nothing imported" in str(e)
            assert "import" not in journal_ops(bank) and bank.ls() == [] and bank.warnings == []
            return
        assert report.pending_review >= 1 and bank.warnings == []
        for kind in ("episode", "step", "rule"):
            for record in bank.ls(kind=kind):
                assert record.tier == "quarantine" and record.review == "pending" and not record.verified
                assert not counts_as_success(record)
                if kind == "episode":
                    record = bank.get(record.id)  # with its trajectory
                    assert record.length == len(record.trajectory) and record.success == (record.outcome == "success")
                    assert record.task.split("/", 1)[0] == record.family and 0 <= record.value <= 1
    finally:
        bank.close()


FUZZ_ROWS: dict[str, list[dict]] = {}


def test_history_reads_past_a_corrupt_journal_line(tmp_path):
    bank = open_test_bank(tmp_path)
    bank.ingest_episode(make_episode("r1", 0, success=True))
    bank.tag("r1-0000", "kept")
    bank.close()
    path = tmp_path / "memory" / "journal.jsonl"
    path.write_bytes(path.read_bytes() + b"{broken\n")
    bank = open_test_bank(tmp_path)
    try:
        assert [h.entry.op for h in bank.history("r1-0000")] == ["ingest", "tag"]
    finally:
        bank.close()


def test_cli_commands_work_in_a_home_broken_by_an_old_import(cli_home, tmp_path, monkeypatch):
    """Defect 1 end to end: an `x..y` import journalled by an older crl; stats, ls, rebuild (now and
    --as-of before the import) and run all work, naming the skipped journal line while it counts."""
    import crl.agent.app as agent_app
    from crl.agent.llm.scripted import ScriptedModel
    from crl.tasks.keyroom import solve
    from crl.tasks.registry import fold_seeds

    write_log(cli_home / "runs", "r9", [make_episode("r9", 0, success=True)])
    assert crl("memory", "sync").exit_code == 0
    before = time.time()
    time.sleep(0.02)
    row = dict(episode_row(exported(tmp_path), True), family="x..y", id="ep:x..y:r1-0000", schema_version=1)
    for key in ("verified", "verified_by", "imported_from", "review", "namespace"):
        row.pop(key, None)
    memory = cli_home / "memory"
    (memory / "imports").mkdir(exist_ok=True)
    write_lines(memory / "imports" / "old.jsonl", [row])
    journal = Journal(memory / "journal.jsonl", fsync=False)
    with journal.locked():
        journal.append([JournalEntry("import", [row["id"]], {"file": "imports/old.jsonl", "count": 1}, "old")])
    line = len((memory / "journal.jsonl").read_text().splitlines())

    assert f"journal line {line} (import)" in crl("memory", "stats").output
    for args in (
        ("memory", "stats"),
        ("memory", "ls"),
        ("memory", "rebuild"),
        ("memory", "rebuild", "--as-of", f"{before:.3f}", "--yes"),
    ):
        r = crl(*args)
        assert r.exit_code == 0 and "Traceback" not in r.output, r.output
    (seed,) = fold_seeds("keyroom/key", "train", 1)
    monkeypatch.setattr(agent_app, "build_chat_model", lambda s: ScriptedModel([f" {a}" for a in solve(seed, "key")]))
    r = crl("run", "keyroom/key", "-n", 1, "--policy", "llm")
    assert r.exit_code == 0 and "Traceback" not in r.output, r.output
