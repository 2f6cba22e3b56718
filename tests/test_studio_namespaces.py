"""The studio's namespace filter: one studio browses every namespace of its home, opening each
namespace's bank on first use (beside the default one, sharing the embedded store's lock), and
every change goes to the namespace of the records it names, journalled there.

The fixture home (two `crl run` runs in the default namespace `crl`, MiniLM embeddings) gets a
second namespace, `bob`, holding a copy of the same episodes (`crl memory import --from-namespace
crl`): the same record ids in both, quarantined in bob (imports wait for review) and regular in crl.
"""

from __future__ import annotations

import html
import json
import shutil

import pytest
from fastapi.testclient import TestClient

from crl.agent.config import load_settings
from crl.agent.studio import STUDIO_ACTOR, Studio, create_app
from crl.memory.bank import ExperienceBank
from crl.memory.config import MemoryConfig
from tests.studio_fixtures import (  # noqa: F401  (fixtures)
    N_FAILED,
    N_SOLVED,
    cli_json,
    invoke,
    memory_rows,
    minilm,
    ok,
    shared_embedder,
    studio_built,
    studio_home,
)

LOOPBACK = "http://127.0.0.1:8750"
N = N_SOLVED + N_FAILED


def add_namespace(home, embedder, name: str = "bob") -> None:
    """Copy the default namespace's episodes into namespace `name` of the same home."""
    export = home.parent / "crl-episodes.jsonl"
    bank = ExperienceBank(home / "memory", runs_dir=home / "runs", embedder=embedder)
    try:
        bank.export(export, kinds=("episode",))
    finally:
        bank.close()
    other = ExperienceBank(
        home / "memory", runs_dir=home / "runs", config=MemoryConfig(namespace=name), embedder=embedder
    )
    try:
        other.import_file(export, from_namespace="crl")
    finally:
        other.close()


@pytest.fixture
def two_namespaces(studio_home, shared_embedder):
    add_namespace(studio_home, shared_embedder)
    return studio_home


@pytest.fixture
def client(two_namespaces):
    studio = Studio(load_settings({"home": str(two_namespaces)}), results=[two_namespaces.parent / "results"])
    app = create_app(studio)
    with TestClient(app, base_url=LOOPBACK) as c:
        c.get("/api/status")
        c.headers["X-CSRF-Token"] = app.state.guard.csrf
        yield c


def test_the_namespaces_of_the_home_are_listed_and_each_browsed_apart(client):
    listed = ok(client.get("/api/namespaces"))
    assert listed["default"] == "crl"
    assert [(n["name"], n["primary"], n["in_store"]) for n in listed["namespaces"]] == [
        ("crl", True, True),
        ("bob", False, True),
    ]
    assert [n["open"] for n in listed["namespaces"]] == [True, False]  # bob's bank is opened when first asked for

    crl, bob = memory_rows(client), memory_rows(client, namespace="bob")
    assert [r["id"] for r in crl] == [r["id"] for r in bob] and len(bob) == N  # the same ids, two banks
    assert {r["tier"] for r in crl} == {"regular"} and {r["tier"] for r in bob} == {"quarantine"}
    assert ok(client.get("/api/memories", params={"namespace": "bob"}))["namespace"] == "bob"
    assert memory_rows(client, namespace="crl") == crl
    assert [n["open"] for n in ok(client.get("/api/namespaces"))["namespaces"]] == [True, True]

    assert len(memory_rows(client, namespace="bob", tier="quarantine", outcome="failure")) == N_FAILED
    assert memory_rows(client, namespace="bob", tier="regular") == []
    hits = ok(client.get("/api/search", params={"q": "take the key", "namespace": "bob", "include_quarantine": True}))
    assert hits and {h["record"]["tier"] for h in hits} == {"quarantine"}
    assert (
        ok(client.get("/api/search", params={"q": "take the key", "namespace": "bob"})) == []
    )  # quarantined: unsearched
    mapped = ok(client.get("/api/map", params={"namespace": "bob"}))
    assert mapped["namespace"] == "bob" and {p["tier"] for p in mapped["points"]} == {"quarantine"}
    record = ok(client.get(f"/api/memories/{bob[0]['id']}", params={"namespace": "bob"}))["record"]
    assert record["tier"] == "quarantine" and record["imported_from"]


def test_a_change_goes_to_the_records_namespace_and_is_journalled_there(client):
    target = memory_rows(client, namespace="bob", outcome="success")[0]["id"]
    done = ok(client.post("/api/memories/actions", json={"action": "release", "ids": [target], "namespace": "bob"}))
    assert done == {"action": "release", "namespace": "bob", "ids": [target]}
    assert {r["id"]: r["tier"] for r in memory_rows(client, namespace="bob")}[target] == "regular"
    ok(
        client.post(
            "/api/memories/actions", json={"action": "tag", "ids": [target], "tags": ["ns-test"], "namespace": "bob"}
        )
    )
    assert [r["id"] for r in memory_rows(client, namespace="bob", tag="ns-test")] == [target]
    assert memory_rows(client, tag="ns-test") == []  # the same id in crl is untouched
    bob_history = ok(client.get(f"/api/memories/{target}/history", params={"namespace": "bob"}))
    assert [(h["op"], h["actor"]) for h in bob_history][-2:] == [("tier", STUDIO_ACTOR), ("tag", STUDIO_ACTOR)]
    crl_history = ok(client.get(f"/api/memories/{target}/history"))
    assert STUDIO_ACTOR not in {h["actor"] for h in crl_history}

    page = client.get("/memories", params={"namespace": "bob"}).text
    assert "<option selected>bob</option>" in page and f'href="/memories/{target}?namespace=bob"' in page

    client.app.state.studio.close()  # releases the embedded lock (the bob bank shared it)
    assert cli_json("--namespace", "bob", "memory", "show", target)["tier"] == "regular"
    assert (
        cli_json("memory", "show", target)["tier"] == "regular"
        and "ns-test" not in cli_json("memory", "show", target)["tags"]
    )
    assert STUDIO_ACTOR in {h["actor"] for h in cli_json("--namespace", "bob", "memory", "history", target)}
    assert STUDIO_ACTOR not in {h["actor"] for h in cli_json("memory", "history", target)}


def test_the_lock_is_held_until_the_studio_closes_even_with_another_namespace_open(client):
    ok(client.get("/api/memories", params={"namespace": "bob"}))
    r = invoke("--namespace", "bob", "memory", "ls")
    assert r.exit_code == 1 and "in use by crl studio" in " ".join(r.output.split())
    client.app.state.studio.close()
    assert len(cli_json("--namespace", "bob", "memory", "ls")) == N


def test_an_unknown_namespace_is_a_clear_404(client):
    for url in ("/api/memories", "/api/map", "/api/rules", "/memories"):
        r = client.get(url, params={"namespace": "carol"})
        assert r.status_code == 404, (url, r.text)
        said = html.unescape(r.text)
        assert "no memory namespace 'carol'" in said and "this home has crl, bob" in said
    r = client.post("/api/memories/actions", json={"action": "pin", "ids": ["ep:keyroom:x"], "namespace": "carol"})
    assert r.status_code == 404 and "no memory namespace 'carol'" in r.json()["error"]
    assert client.get("/api/memories", params={"namespace": "x" * 65}).status_code == 422
    assert [n["name"] for n in ok(client.get("/api/namespaces"))["namespaces"]] == ["crl", "bob"]  # nothing made


def test_an_episodes_memory_links_go_to_the_namespace_its_run_learned_from(client, two_namespaces):
    runs = ok(client.get("/api/runs"))
    failed = runs[0]["run_id"]  # newest first: the run of failures
    home_links = ok(client.get(f"/api/runs/{failed}/episodes/0"))
    assert home_links["memory_link"] == f"/memories/ep:keyroom:{failed}-0000"
    source = two_namespaces / "runs" / failed
    copy = two_namespaces / "runs" / "20990101-000000-bob"
    shutil.copytree(source, copy)
    info = json.loads((copy / "run.json").read_text())
    info["run_id"] = copy.name
    info["settings"]["memory"]["namespace"] = "bob"
    (copy / "run.json").write_text(json.dumps(info))
    log = (copy / "episodes.jsonl").read_text().replace(failed, copy.name)
    (copy / "episodes.jsonl").write_text(log)
    ep = ok(client.get(f"/api/runs/{copy.name}/episodes/0"))
    assert ep["namespace"] == "bob" and ep["memory_link"] == f"/memories/ep:keyroom:{copy.name}-0000?namespace=bob"
    links = [m["link"] for s in ep["steps"] for m in s["memories"] if m["link"]]
    assert links and all(link.endswith("?namespace=bob") for link in links)
    assert not any("namespace" in (m["link"] or "") for s in home_links["steps"] for m in s["memories"])
    page = client.get(f"/runs/{copy.name}/episodes/0").text
    assert f'href="/memories/ep:keyroom:{copy.name}-0000?namespace=bob"' in page
