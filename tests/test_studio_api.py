"""`crl studio`'s API and pages through FastAPI's TestClient, on a real bank (embedded Chroma, MiniLM
embeddings) filled by two scripted `crl run` runs: every endpoint, its bad input answered with a
clear 4xx, the guard (Host, token, CSRF), and curation seen by the CLI afterwards."""

from __future__ import annotations

import json
import uuid

import pytest
from fastapi.testclient import TestClient

from crl.agent.config import load_settings
from crl.agent.studio import STUDIO_ACTOR, Studio, create_app
from crl.agent.studio.security import CSRF_COOKIE, TOKEN_COOKIE
from crl.finetune.dataset_card import write_dataset
from crl.finetune.registry import AdapterRegistry
from crl.finetune.sft_data import BuiltDataset
from tests.chroma_server import chroma_server  # noqa: F401  (a fixture)
from tests.finetune_fixtures import fake_trained
from tests.studio_fixtures import (  # noqa: F401  (fixtures)
    BASE,
    N_FAILED,
    N_SOLVED,
    RULE_TEXT,
    cli_json,
    invoke,
    memory_rows,
    minilm,
    ok,
    running_copy,
    shared_embedder,
    studio_built,
    studio_home,
)

LOOPBACK = "http://127.0.0.1:8750"


def open_studio(home, **app_args):
    studio = Studio(load_settings({"home": str(home)}), results=[home.parent / "results"])
    return studio, create_app(studio, **app_args)


@pytest.fixture
def client(studio_home):
    studio, app = open_studio(studio_home)
    with TestClient(app, base_url=LOOPBACK) as c:
        c.get("/api/status")  # the browser's first visit: the CSRF cookie
        c.headers["X-CSRF-Token"] = app.state.guard.csrf
        yield c


def refused(response, status: int, words: str) -> str:
    assert response.status_code == status, response.text
    message = response.json()["error"]
    assert words in message, message
    return message


# ---- status and runs ---------------------------------------------------------------------


def test_status_says_the_studio_holds_the_embedded_lock_and_the_cli_is_told_to_use_server_mode(client):
    s = ok(client.get("/api/status"))
    assert s["mode"] == "embedded" and s["holds_lock"] and s["namespace"] == "crl"
    assert "holds the lock" in s["lock_note"] and "--memory-url" in s["lock_note"]
    assert s["stats"]["episodes"] == N_SOLVED + N_FAILED and s["stats"]["rules"] == 1
    r = invoke("memory", "ls")
    said = " ".join(r.output.split())
    assert r.exit_code == 1 and "in use by crl studio (pid" in said and "--memory-url" in said
    assert "holds the lock" in client.get("/").text


def test_runs_list_detail_curve_progress_and_episode(client):
    runs = ok(client.get("/api/runs"))
    assert len(runs) == 2
    failed, solved = runs  # newest first
    assert (solved["successes"], solved["finished"], solved["episodes"]) == (N_SOLVED, N_SOLVED, N_SOLVED)
    assert failed["successes"] == 0 and failed["policy"] == "llm" and failed["model"] == "scripted"
    lo, hi = failed["ci95"]
    assert lo == 0.0 and 0.4 < hi < 0.7  # Wilson interval of 0/3

    detail = ok(client.get(f"/api/runs/{solved['run_id']}"))
    assert [e["n"] for e in detail["episodes"]] == list(range(N_SOLVED))
    assert [p["rate"] for p in detail["curve"]] == [1.0, 1.0] and detail["curve"][-1]["episodes"] == N_SOLVED

    p = ok(client.get(f"/api/runs/{failed['run_id']}/progress"))
    assert (p["finished"], p["started"], p["running"], p["status"]) == (N_FAILED, N_FAILED, [], "finished")
    assert p["log_bytes"] > 0

    ep = ok(client.get(f"/api/runs/{failed['run_id']}/episodes/0"))
    assert ep["episode"]["success"] is False and len(ep["steps"]) == 3
    first = ep["steps"][0]
    assert first["decided_by"] == "llm" and first["action"] == "look" and first["observation"]
    ids = {m["id"]: m for m in first["memories"]}
    solved_ids = {f"ep:keyroom:{solved['run_id']}-{i:04d}" for i in range(N_SOLVED)}
    assert solved_ids <= set(ids)
    shown = ids[sorted(solved_ids)[0]]
    assert shown["link"] == f"/memories/{sorted(solved_ids)[0]}" and shown["in_prompt"]
    assert "similarity" in shown["breakdown"]
    assert any(m["id"].startswith("ru:keyroom:") and m["link"] for m in first["memories"]), "the rule in the prompt"

    refused(client.get("/api/runs/nosuch"), 404, "no run 'nosuch'")
    refused(client.get(f"/api/runs/{failed['run_id']}/episodes/99"), 404, "has no episode 99")
    refused(client.get(f"/api/runs/{failed['run_id']}/episodes/x"), 422, "number")
    refused(client.get("/api/runs", params={"colour": "red"}), 400, "unknown query parameter(s) colour")


def test_runs_on_the_same_seeds_compare_seed_by_seed_as_crl_compare_does(client, studio_home, monkeypatch):
    """A looking model replays the solved run's seeds (memory off): the page and the API pair them seed by
    seed, the way `crl compare` does; bad selections are clear 4xx."""
    import crl.agent.app
    from crl.agent.llm.scripted import ScriptedModel

    monkeypatch.setattr(crl.agent.app, "build_chat_model", lambda settings: ScriptedModel(lambda msgs: " look"))
    r = invoke(
        "--home", studio_home, "run", "keyroom/key", "-n", N_SOLVED, "--max-steps", 2, "--policy", "llm", "--no-memory"
    )
    assert r.exit_code == 0, r.output
    looked, failed, solved = ok(client.get("/api/runs"))  # newest first
    data = ok(client.get("/api/compare", params={"run": [solved["run_id"], looked["run_id"]]}))
    assert [row["successes"] for row in data["runs"]] == [N_SOLVED, 0] and data["task"] == "keyroom/key"
    (pair,) = data["pairs"]
    assert (pair["seeds"], pair["a_only"], pair["b_only"]) == (N_SOLVED, N_SOLVED, 0)
    assert pair["p_two_sided"] == pytest.approx(2 * 0.5**N_SOLVED)
    cli = cli_json("compare", solved["run_id"], looked["run_id"], "--json")
    assert cli["pairs"] == data["pairs"]
    three = ok(
        client.get(
            "/api/compare", params={"run": [solved["run_id"], looked["run_id"], failed["run_id"]], "all_pairs": "true"}
        )
    )
    assert len(three["pairs"]) == 3 and three["pairs"][1]["seeds"] == 0  # the failures played other seeds

    page = client.get("/compare", params={"run": [solved["run_id"], looked["run_id"]]})
    assert page.status_code == 200 and 'id="pairs"' in page.text and looked["run_id"] in page.text
    assert f'name="run" value="{looked["run_id"]}"' in client.get("/").text  # the runs page's tick boxes

    refused(client.get("/api/compare", params={"run": solved["run_id"]}), 400, "at least two runs")
    refused(client.get("/api/compare", params={"run": [solved["run_id"]] * 2}), 400, "named twice")
    refused(client.get("/api/compare", params={"run": [solved["run_id"], "nosuch"]}), 404, "no run 'nosuch'")
    refused(client.get("/api/compare", params={"run": [solved["run_id"], looked["run_id"]], "x": "1"}), 400, "unknown")
    bad = client.get("/compare", params={"run": solved["run_id"]})
    assert bad.status_code == 400 and "<html" in bad.text and "at least two runs" in bad.text


def test_a_running_runs_progress_is_read_from_its_log_as_it_grows(client, studio_home):
    failed = ok(client.get("/api/runs"))[0]
    live, lines = running_copy(studio_home / "runs" / failed["run_id"], studio_home)
    ends = [i for i, line in enumerate(lines) if line["event"] == "end"]
    log = live / "episodes.jsonl"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines[: ends[0] + 1]))  # one episode ended so far
    p = ok(client.get(f"/api/runs/{live.name}/progress"))
    assert (p["status"], p["finished"], p["started"], len(p["running"])) == ("running", 1, N_FAILED, N_FAILED - 1)
    assert all(e["steps"] >= 1 and not e["finished"] for e in p["running"])
    with log.open("a") as f:
        f.write("".join(json.dumps(line) + "\n" for line in lines[ends[0] + 1 :]))
    p = ok(client.get(f"/api/runs/{live.name}/progress"))
    assert (p["finished"], p["running"]) == (N_FAILED, [])
    assert '"status": "running"' in client.get(f"/runs/{live.name}").text  # the page polls while it runs


def test_experiments_are_read_from_the_results_folders(client):
    assert [e["name"] for e in ok(client.get("/api/experiments"))] == ["keyroom-key"]
    exp = ok(client.get("/api/experiments/keyroom-key"))
    assert exp["spec"]["task"] == "keyroom/key" and set(exp["arms"]) == set(exp["spec"]["arms"])
    curve = exp["arms"]["random"]
    assert [p["train_episodes"] for p in curve] == sorted(p["train_episodes"] for p in curve)
    assert all(p["ci95"][0] <= p["success_rate"] <= p["ci95"][1] for p in curve)
    assert exp["pairs"] and {"fisher_p", "mcnemar_p"} <= set(exp["pairs"][0])
    refused(client.get("/api/experiments/nosuch"), 404, "no experiment 'nosuch'")


# ---- memory ------------------------------------------------------------------------------


def release(client) -> None:
    """Let the bank go (the studio holds the embedded store's lock while open), so the CLI can read it."""
    client.app.state.studio.close()


def test_memories_list_as_the_cli_lists(client):
    everything = memory_rows(client)
    assert len(everything) == N_SOLVED + N_FAILED and all("trajectory" not in r for r in everything)
    release(client)
    assert [r["id"] for r in everything] == [r["id"] for r in cli_json("memory", "ls")]


def test_memory_filters(client):
    assert {r["outcome"] for r in memory_rows(client, outcome="success")} == {"success"}
    assert len(memory_rows(client, outcome="success")) == N_SOLVED
    assert len(memory_rows(client, outcome="failure")) == N_FAILED
    assert len(memory_rows(client, skill="key")) == N_SOLVED
    assert len(memory_rows(client, family="keyroom", variant="key", tier="regular", source="real")) == 5
    assert memory_rows(client, family="nosuch") == [] and memory_rows(client, source="synthetic") == []
    assert memory_rows(client, source="imported") == []
    values = [r["value"] for r in memory_rows(client, sort="value")]
    assert values == sorted(values, reverse=True) and values[0] > values[-1]
    steps = memory_rows(client, kind="step")
    assert steps and {s["kind"] for s in steps} == {"step"}
    assert [r["kind"] for r in memory_rows(client, kind="rule")] == ["rule"]
    page = ok(client.get("/api/memories", params={"per_page": 2, "page": 3}))
    assert (page["total"], page["pages"], page["page"], len(page["rows"])) == (5, 3, 3, 1)


def test_memory_bad_filters_are_clear_4xx(client):
    refused(client.get("/api/memories", params={"outcome": "won"}), 400, "outcome must be one of success")
    refused(client.get("/api/memories", params={"tier": "gold"}), 400, "tier must be one of golden")
    refused(client.get("/api/memories", params={"source": "forged"}), 400, "source must be one of real")
    assert ok(client.get("/api/memories", params={"outcome": "", "tier": "", "family": ""}))["total"] == 5
    refused(client.get("/api/memories", params={"sort": "best"}), 422, "sort")
    refused(client.get("/api/memories", params={"kind": "thing"}), 422, "kind")
    refused(
        client.get("/api/memories", params={"per_page": 500}),
        422,
        "per_page: Input should be less than or equal to 200",
    )
    refused(client.get("/api/memories", params={"page": 0}), 422, "page")
    refused(client.get("/api/memories", params={"page": 9}), 400, "past the last page (1)")
    refused(client.get("/api/memories", params={"familly": "keyroom"}), 400, "unknown query parameter(s) familly")
    refused(client.get("/api/memories/ep:keyroom:nosuch"), 404, "no memory record")
    refused(client.get("/api/memories/zzz"), 404, "no memory record 'zzz'")
    refused(client.get("/api/memories/zzz/history"), 404, "no memory record")


def test_search_and_record_with_history(client):
    hits = ok(client.get("/api/search", params={"q": "take the iron key", "k": 5}))
    assert 0 < len(hits) <= 5
    sims = [h["similarity"] for h in hits]
    assert sims == sorted(sims, reverse=True) and all(-1 <= s <= 1 for s in sims)
    only_episodes = ok(client.get("/api/search", params={"q": "key", "kind": "episode"}))
    assert only_episodes and {h["record"]["kind"] for h in only_episodes} == {"episode"}
    refused(client.get("/api/search"), 422, "q: Field required")
    refused(client.get("/api/search", params={"q": "key", "k": 0}), 422, "k")
    refused(client.get("/api/search", params={"q": "   "}), 400, "search text is empty")

    ep = memory_rows(client, outcome="success")[0]
    rec = ok(client.get(f"/api/memories/{ep['episode_id']}"))  # a bare episode id resolves, as in the CLI
    assert rec["record"]["id"] == ep["id"] and rec["record"]["trajectory"]
    ops = [h["op"] for h in rec["history"]]
    assert ops[0] == "ingest" and set(ops[1:]) <= {"credit"}  # later episodes used it
    step = ok(client.get(f"/api/memories/st:keyroom:{ep['episode_id']}:0"))
    assert step["record"]["kind"] == "step" and step["episode_link"] == f"/memories/{ep['id']}"
    assert ok(client.get(f"/api/memories/{ep['id']}/history"))[0]["op"] == "ingest"


def test_curation_is_journalled_as_a_studio_edit_and_seen_by_the_cli(client):
    solved = [r["id"] for r in memory_rows(client, outcome="success")]
    done = ok(client.post("/api/memories/actions", json={"action": "pin", "ids": solved}))
    assert done == {"action": "pin", "namespace": "crl", "ids": solved}
    assert {r["tier"] for r in memory_rows(client, outcome="success")} == {"golden"}
    ok(client.post("/api/memories/actions", json={"action": "tag", "ids": solved[:1], "tags": ["reviewed"]}))
    assert [r["id"] for r in memory_rows(client, tag="reviewed")] == solved[:1]
    ok(client.post("/api/memories/actions", json={"action": "untag", "ids": solved[:1], "tags": ["reviewed"]}))
    assert memory_rows(client, tag="reviewed") == []
    failed = memory_rows(client, outcome="failure")[0]["id"]
    ok(client.post("/api/memories/actions", json={"action": "quarantine", "ids": [failed]}))
    assert [r["id"] for r in memory_rows(client, tier="quarantine")] == [failed]
    history = ok(client.get(f"/api/memories/{failed}/history"))
    assert [(h["op"], h["actor"]) for h in history][-1] == ("tier", STUDIO_ACTOR)

    doomed = memory_rows(client, outcome="failure")[-1]["id"]
    refused(client.post("/api/memories/actions", json={"action": "delete", "ids": [doomed]}), 400, "confirm it")
    ok(client.get(f"/api/memories/{doomed}"))
    ok(client.post("/api/memories/actions", json={"action": "delete", "ids": [doomed], "confirm": True}))
    refused(client.get(f"/api/memories/{doomed}"), 404, "no memory record")

    refused(client.post("/api/memories/actions", json={"action": "burn", "ids": [failed]}), 422, "action")
    refused(client.post("/api/memories/actions", json={"action": "pin", "ids": []}), 422, "ids")
    refused(
        client.post("/api/memories/actions", json={"action": "tag", "ids": [failed]}), 400, "needs at least one tag"
    )
    refused(
        client.post("/api/memories/actions", json={"action": "pin", "ids": ["ep:keyroom:nosuch"]}), 404, "no memory"
    )
    refused(client.post("/api/memories/actions", json={"action": "pin", "ids": [failed], "x": 1}), 422, "x")
    refused(
        client.post("/api/memories/actions", content=b"not json", headers={"content-type": "application/json"}),
        422,
        "JSON",
    )

    release(client)
    assert cli_json("memory", "show", failed)["tier"] == "quarantine"
    assert failed in {r["id"] for r in cli_json("memory", "ls", "--tier", "quarantine")}
    items = cli_json("memory", "history", failed)
    assert items[-1]["actor"] == STUDIO_ACTOR and items[-1]["payload"] == {"tier": "quarantine"}


def test_the_api_offers_exactly_the_curation_actions_of_the_library_side():
    from typing import get_args

    from crl.agent.studio.api import RecordAction, RuleAction
    from crl.agent.studio.memory_view import RECORD_ACTIONS, RULE_ACTIONS

    assert get_args(RecordAction.model_fields["action"].annotation) == RECORD_ACTIONS
    assert get_args(RuleAction.model_fields["action"].annotation) == RULE_ACTIONS


def test_map_projects_the_stored_embeddings(client):
    m = ok(client.get("/api/map", params={"color": "family"}))
    assert (m["total"], m["sampled"], m["color"]) == (5, 5, "family")
    assert {p["outcome"] for p in m["points"]} == {"success", "failure"}
    assert len({(p["x"], p["y"]) for p in m["points"]}) == 5 and 0 < sum(m["explained"]) <= 1.0 + 1e-6
    rid = m["points"][0]["id"]
    ok(client.post("/api/memories/actions", json={"action": "quarantine", "ids": [rid]}))
    again = ok(client.get("/api/map", params={"color": "tier"}))
    assert {p["id"]: p["tier"] for p in again["points"]}[rid] == "quarantine"  # the map follows the bank
    sampled = ok(client.get("/api/map", params={"kind": "step", "limit": 3, "seed": 1}))
    assert sampled["sampled"] == 3 and sampled["total"] > 3
    refused(client.get("/api/map", params={"limit": 0}), 422, "limit")
    refused(client.get("/api/map", params={"limit": 10**6}), 422, "limit")
    refused(client.get("/api/map", params={"color": "mood"}), 422, "color")


# ---- rules and adapters --------------------------------------------------------------------


def test_rules_list_show_edit_pin_and_remove(client):
    rules = ok(client.get("/api/rules", params={"scope": "keyroom"}))
    assert [r["text"] for r in rules] == [RULE_TEXT] and rules[0]["author"] == "scripted"
    rid = rules[0]["id"]
    assert ok(client.get("/api/rules", params={"scope": "twx"})) == []
    one = ok(client.get(f"/api/rules/{rid}"))
    assert one["rule"]["score"] == 1.0 and [h["op"] for h in one["history"] if h["op"] != "credit"] == ["rule_add"]
    edited = ok(client.post(f"/api/rules/{rid}/edit", json={"text": "  Take the key\tfirst.  "}))
    assert edited == {"id": rid, "text": "Take the key first."}
    ok(client.post("/api/rules/actions", json={"action": "pin", "ids": [rid]}))
    after = ok(client.get(f"/api/rules/{rid}"))
    assert after["rule"]["pinned"] and after["rule"]["text"] == "Take the key first."
    edits = [(h["op"], h["actor"]) for h in after["history"] if h["op"] not in ("rule_add", "credit")]
    assert edits == [("rule_edit", STUDIO_ACTOR), ("tier", STUDIO_ACTOR)]
    ok(client.post("/api/rules/actions", json={"action": "unpin", "ids": [rid]}))
    assert not ok(client.get(f"/api/rules/{rid}"))["rule"]["pinned"]
    refused(client.post("/api/rules/actions", json={"action": "delete", "ids": [rid]}), 400, "confirm it")
    refused(client.get("/api/rules/ru:keyroom:nosuch"), 404, "no rule")
    refused(client.post("/api/rules/ru:keyroom:nosuch/edit", json={"text": "x y"}), 404, "no rule")
    refused(client.post(f"/api/rules/{rid}/edit", json={"text": ""}), 422, "text")
    ok(client.post("/api/rules/actions", json={"action": "delete", "ids": [rid], "confirm": True}))
    assert ok(client.get("/api/rules")) == []


def test_adapters_lineage_gate_promote_and_rollback(client):
    data = ok(client.get("/api/adapters"))
    rows = {a["id"]: a for a in data["adapters"]}
    assert set(rows) == {"sft-1", "sft-2"} and rows["sft-1"]["promoted"] and not rows["sft-2"]["promoted"]
    assert rows["sft-2"]["gate"]["p_value"] == pytest.approx(0.031) and rows["sft-2"]["parent"] == "sft-1"
    one = ok(client.get("/api/adapters/sft-2"))
    assert one["ancestors"] == ["sft-1"] and one["gate"][0]["rule"] == "better (paired)"
    assert ok(client.get("/api/adapters/sft-1"))["children"] == ["sft-2"]
    promoted = ok(client.post("/api/adapters/sft-2/promote"))
    assert (promoted["adapter"], promoted["previous"], promoted["actor"]) == ("sft-2", "sft-1", STUDIO_ACTOR)
    refused(client.post("/api/adapters/sft-2/promote"), 400, "already the promoted one")
    back = ok(client.post("/api/adapters/rollback", json={"base_model": BASE}))
    assert (back["adapter"], back["previous"]) == ("sft-1", "sft-2")
    assert ok(client.get("/api/adapters"))["promotions"][0]["op"] == "rollback"
    refused(client.get("/api/adapters/nosuch"), 404, "no adapter 'nosuch'")
    refused(client.post("/api/adapters/nosuch/promote"), 404, "no adapter")
    refused(client.post("/api/adapters/rollback", json={"base_model": "other"}), 400, "nothing to roll back")
    refused(client.post("/api/adapters/rollback", json={}), 422, "base_model")


def test_an_adapter_trained_on_a_record_marked_malicious_is_flagged_until_the_record_is_released(client, studio_home):
    bad = next(r["id"] for r in memory_rows(client) if r["outcome"] == "success")
    root, registry = studio_home.parent, AdapterRegistry.of(studio_home)
    for name, sources in (("ds-bad", [bad]), ("ds-clean", [])):
        rows = [{"task": "keyroom/key", "prompt": [], "completion": []}]
        write_dataset(root / name, BuiltDataset("sft", rows, source_episode_ids=sources), {}, namespace="crl")
    for a, parent, ds in (("sft-bad", "sft-1", "ds-bad"), ("dpo-child", "sft-bad", "ds-clean")):
        registry.register(a, "sft", fake_trained(root, a), BASE, "/m", root / ds, {}, {}, parent=parent)
    registry.promote("sft-bad", reason="test", actor="user")
    assert not ok(client.get("/api/adapters/sft-bad"))["contaminated"]
    assert "Warning" not in client.get("/adapters").text

    client.app.state.studio.bank.quarantine_malicious([bad], reason="forged success")
    rows = {a["id"]: a for a in ok(client.get("/api/adapters"))["adapters"]}
    assert rows["sft-bad"]["malicious_sources"] == [bad] and rows["sft-bad"]["namespace"] == "crl"
    assert rows["dpo-child"]["malicious_via"] == "sft-bad" and rows["dpo-child"]["malicious_sources"] == []
    assert rows["sft-bad"]["contaminated"] and rows["dpo-child"]["contaminated"] and not rows["sft-2"]["contaminated"]
    one = ok(client.get("/api/adapters/sft-bad"))
    assert one["malicious_sources"] == [bad] and one["promoted"]
    page = client.get("/adapters").text
    warning = page.split('id="contaminated-promoted"')[1].split("</p>")[0]
    assert "sft-bad" in warning and f'data-rollback="{BASE}"' in warning
    assert "trained on 1 malicious record(s)" in page and 'parent <a href="/adapters/sft-bad">sft-bad</a>' in page
    detail = client.get("/adapters/sft-bad").text
    assert bad in detail and "promoted adapter is contaminated" in detail and "namespace crl" in detail
    assert "continued from" in client.get("/adapters/dpo-child").text

    ok(client.post("/api/memories/actions", json={"action": "release", "ids": [bad]}))
    after = {a["id"]: a for a in ok(client.get("/api/adapters"))["adapters"]}
    assert not after["sft-bad"]["contaminated"] and not after["dpo-child"]["contaminated"]
    assert 'id="contaminated-promoted"' not in client.get("/adapters").text
    release(client)
    listed = {r["id"]: r for r in cli_json("adapters", "ls")}
    assert not listed["sft-bad"]["contaminated"] and listed["sft-bad"]["malicious_sources"] == []


# ---- pages -----------------------------------------------------------------------------------


def test_every_page_renders_and_errors_are_pages(client):
    runs = ok(client.get("/api/runs"))
    rid = runs[-1]["run_id"]
    ep = memory_rows(client)[0]["id"]
    rule = ok(client.get("/api/rules"))[0]["id"]
    for url, text in [
        ("/", rid),
        (f"/runs/{rid}", "Learning curve"),
        (f"/runs/{rid}/episodes/0", "decided by"),
        ("/experiments", "keyroom-key"),
        ("/experiments/keyroom-key", "experiment-data"),
        ("/memories", "5 episode(s)"),
        ("/memories?outcome=success&sort=value", "2 episode(s)"),
        ("/memories?kind=episode&family=&outcome=failure&tier=&source=&q=", "3 episode(s)"),
        ("/memories?q=iron+key", "most similar first"),
        (f"/memories/{ep}", "History"),
        ("/map?color=source", "map-svg"),
        ("/rules", RULE_TEXT),
        (f"/rules/{rule}", "rule-edit"),
        ("/adapters", "sft-2"),
        ("/adapters/sft-2", "0.031"),
    ]:
        r = client.get(url)
        assert r.status_code == 200 and text in r.text, (url, r.status_code, r.text[:300])
        assert r.headers["content-security-policy"].startswith("default-src 'self'")
    r = client.get(f"/memories/{rule}", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/rules/{rule}"
    for url, status, text in [
        ("/memories/ep:keyroom:nosuch", 404, "no memory record"),
        ("/runs/nosuch", 404, "no run"),
        ("/memories?per_page=999", 422, "per_page"),
        ("/map?color=mood", 400, "color must be one of"),
        ("/nowhere", 404, "no such page"),
    ]:
        r = client.get(url)
        assert r.status_code == status and text in r.text and "<html" in r.text, (url, r.status_code, r.text[:200])
    assert client.get("/static/studio.js").status_code == 200


# ---- the guard -------------------------------------------------------------------------------


def test_mutations_need_the_csrf_token_and_the_same_origin(client):
    failed = memory_rows(client, outcome="failure")[0]["id"]
    body = {"action": "pin", "ids": [failed]}
    csrf = client.headers.pop("X-CSRF-Token")
    refused(client.post("/api/memories/actions", json=body), 403, "CSRF")
    refused(client.post("/api/memories/actions", json=body, headers={"X-CSRF-Token": "forged"}), 403, "CSRF")
    client.cookies.delete(CSRF_COOKIE)
    refused(client.post("/api/memories/actions", json=body, headers={"X-CSRF-Token": csrf}), 403, "CSRF")
    client.get("/")
    refused(
        client.post(
            "/api/memories/actions", json=body, headers={"X-CSRF-Token": csrf, "Origin": "http://evil.example"}
        ),
        403,
        "cross-origin",
    )
    assert memory_rows(client, outcome="failure")[0]["tier"] == "regular"
    ok(client.post("/api/memories/actions", json=body, headers={"X-CSRF-Token": csrf, "Origin": LOOPBACK}))


def test_loopback_studio_refuses_other_host_headers(client):
    r = client.get("/api/status", headers={"Host": "attacker.example"})
    assert r.status_code == 403 and "loopback" in r.json()["error"]
    assert client.get("/api/status", headers={"Host": "localhost:8750"}).status_code == 200


def test_beyond_loopback_a_token_is_required_and_checked(studio_home):
    settings = load_settings({"home": str(studio_home)})
    with pytest.raises(ValueError, match="--token"):
        create_app(Studio.__new__(Studio), host="0.0.0.0")
    with pytest.raises(ValueError, match="empty"):
        create_app(Studio.__new__(Studio), host="0.0.0.0", token=" ")
    studio = Studio(settings)
    app = create_app(studio, host="0.0.0.0", token="s3cret")
    with TestClient(app, base_url="http://studio.lan:8750") as c:
        refused(c.get("/api/status"), 401, "needs its token")
        refused(c.get("/api/status", headers={"Authorization": "Bearer nope"}), 401, "wrong studio token")
        assert c.get("/", headers={"Authorization": "Bearer nope"}).status_code == 401
        assert c.get("/api/status", headers={"Authorization": "Bearer s3cret"}).json()["mode"] == "embedded"
        r = c.get("/memories?token=s3cret&outcome=success", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/memories?outcome=success"
        assert c.cookies.get(TOKEN_COOKIE) == "s3cret"
        assert "2 episode(s)" in c.get("/memories?outcome=success").text
        c.cookies.delete(TOKEN_COOKIE)
        refused(c.get("/api/runs"), 401, "needs its token")


def test_the_cli_serves_the_studio_on_the_address_given(studio_home, monkeypatch):
    import uvicorn

    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, host, port, log_level: served.append((app, host, port)))
    r = invoke("studio", "--port", 8799, "--results", studio_home.parent / "results")
    said = " ".join(r.output.split())
    assert r.exit_code == 0 and "crl studio on http://127.0.0.1:8799/ (embedded, namespace crl" in said
    assert "holds the lock" in said
    app, host, port = served.pop()
    assert (host, port) == ("127.0.0.1", 8799)
    with TestClient(app, base_url=LOOPBACK) as c:
        assert [e["name"] for e in ok(c.get("/api/experiments"))] == ["keyroom-key"]
    monkeypatch.setenv("CRL_STUDIO_TOKEN", "t0ken")
    r = invoke("studio", "--host", "0.0.0.0")
    assert r.exit_code == 0 and "http://0.0.0.0:8750/?token=t0ken" in r.output
    app, host, _ = served.pop()
    with TestClient(app, base_url="http://box.lan:8750") as c:
        assert c.get("/api/status").status_code == 401
        assert c.get("/api/status", headers={"Authorization": "Bearer t0ken"}).status_code == 200


def test_the_cli_refuses_a_public_bind_without_a_token(studio_home):
    r = invoke("studio", "--host", "0.0.0.0", "--port", "1")
    assert r.exit_code == 1 and "--token" in r.output and "Traceback" not in r.output


# ---- server mode ------------------------------------------------------------------------------


@pytest.mark.slow
def test_server_mode_sees_what_a_run_writes_while_the_studio_is_open(
    tmp_path, chroma_server, shared_embedder, monkeypatch
):
    import crl.agent.app
    from crl.agent.llm.scripted import ScriptedModel

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CRL_MEMORY__NAMESPACE", "studio" + uuid.uuid4().hex[:8])
    home = tmp_path / ".crl"
    settings = load_settings({"home": str(home), "memory": {"url": chroma_server.url}})
    studio = Studio(settings)
    app = create_app(studio)
    with TestClient(app, base_url=LOOPBACK) as c:
        s = ok(c.get("/api/status"))
        assert s["mode"] == f"server {chroma_server.url}" and not s["holds_lock"] and "runs may write" in s["lock_note"]
        assert ok(c.get("/api/memories"))["total"] == 0
        monkeypatch.setattr(crl.agent.app, "build_chat_model", lambda settings: ScriptedModel(lambda m: " look"))
        r = invoke("--home", home, "run", "keyroom/key", "-n", 2, "--max-steps", 2, "--memory-url", chroma_server.url)
        assert r.exit_code == 0, r.output
        assert ok(c.get("/api/memories"))["total"] == 2
        run = ok(c.get("/api/runs"))[0]
        assert run["finished"] == 2

        other = "other" + uuid.uuid4().hex[:8]  # a second namespace of the home, written while the studio is open
        r = invoke("--home", home, "--namespace", other, "run", "keyroom/key", "-n", 1, "--max-steps", 2, "--seed", 7)
        assert r.exit_code == 0, r.output
        listed = ok(c.get("/api/namespaces"))
        assert [n["name"] for n in listed["namespaces"]] == [settings.memory.namespace, other]
        assert other not in listed["other_homes"]
        page = ok(c.get("/api/memories", params={"namespace": other}))
        assert page["namespace"] == other and page["total"] == 1 and page["rows"][0]["seed"] == 7
        assert ok(c.get("/api/memories"))["total"] == 2


def test_listings_follow_the_journal_without_scanning_again(client):
    from crl.agent.studio.memory_view import SORTS, RecordFilter

    view = client.app.state.studio.memory
    filters = [
        {},
        {"outcome": "failure"},
        {"tier": "golden"},
        {"tier": "quarantine"},
        {"tag": "keep"},
        {"kind": "rule"},
        {"kind": "step", "outcome": "success"},
    ]
    for f in filters:
        for sort in ("recent", "value"):
            view.listing(RecordFilter(**f), sort)
    scans = view.listings.scans
    ids = [r["id"] for r in memory_rows(client)]
    rule = ok(client.get("/api/rules"))[0]["id"]
    ok(client.post("/api/memories/actions", json={"action": "pin", "ids": ids[:2]}))
    ok(client.post("/api/memories/actions", json={"action": "quarantine", "ids": ids[2:3]}))
    ok(client.post("/api/memories/actions", json={"action": "tag", "ids": ids[1:4], "tags": ["keep"]}))
    ok(client.post("/api/rules/actions", json={"action": "pin", "ids": [rule]}))
    ok(client.post("/api/memories/actions", json={"action": "delete", "ids": ids[3:4], "confirm": True}))
    for f in filters:
        for sort in ("recent", "value"):
            shown = [r.id for r in view.listing(RecordFilter(**f), sort)]
            kind = f.get("kind", "episode")
            listed = [r.id for r in view.bank.ls(kind, **{k: v for k, v in f.items() if k != "kind"}, sort=SORTS[sort])]
            assert shown == listed, (f, sort)
    assert view.listings.scans == scans + 1  # only the steps are read again (an episode's steps move with it)
    assert len(memory_rows(client, tier="golden")) == 2 and len(memory_rows(client, tag="keep")) == 2


def test_the_source_filter_tells_imported_records_apart():
    from crl.agent.studio.listings import matches, origin_of
    from crl.agent.studio.memory_view import RecordFilter
    from crl.memory.records import EpisodeRecord

    common = dict(
        kind="episode", family="keyroom", variant="key", tier="regular", tags=[], skills=[], outcome="success"
    )
    played = EpisodeRecord.model_construct(source="real", imported_from=None, **common)
    imported = EpisodeRecord.model_construct(source="real", imported_from="imports/ab12.jsonl", **common)
    assert (origin_of(played), origin_of(imported)) == ("real", "imported")
    assert matches(RecordFilter(source="real"), played) and not matches(RecordFilter(source="real"), imported)
    assert matches(RecordFilter(source="imported"), imported) and not matches(RecordFilter(source="imported"), played)


def test_closing_the_studio_waits_for_its_background_listing(studio_home, caplog):
    """Closed right after it starts listing (a server shut down at once), the studio waits for the
    listing instead of closing the bank under it."""
    studio = Studio(load_settings({"home": str(studio_home)}))
    thread = studio.warm_up()
    studio.close()
    assert not thread.is_alive()
    assert "listing the" not in caplog.text
