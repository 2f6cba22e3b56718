"""`crl studio` end to end in a real headless Chromium (Debian's `chromium`, driven by Playwright's
Python package): open the studio on the fixture bank, filter, open an episode, follow a memory
link, quarantine that memory, then check that the CLI sees it quarantined; click a point of the
bank's map and land on that memory; watch a running run's progress change in the page as its
episode log grows; pick another namespace in the memory browser and curate a record there.
Screenshots of the main pages go to the test's folder, or to $STUDIO_SCREENSHOTS when set
(docs/images/ for the README).

Skipped, with the reason shown, only where /usr/bin/chromium or the playwright package is
missing (`apt-get install chromium`, `pip install playwright`; no `playwright install`).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from urllib.parse import unquote

import pytest

from crl.agent.config import load_settings
from crl.agent.studio import Studio, create_app
from tests.chroma_server import free_port
from tests.studio_fixtures import (  # noqa: F401  (fixtures)
    N_FAILED,
    invoke,
    minilm,
    running_copy,
    shared_embedder,
    studio_built,
    studio_home,
)
from tests.test_studio_namespaces import add_namespace

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

if not CHROMIUM.exists():
    pytest.skip(
        f"browser test skipped: no Chromium at {CHROMIUM} (install it with `apt-get install -y chromium`)",
        allow_module_level=True,
    )
playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="browser test skipped: the playwright package is missing (`pip install playwright`)"
)


class ServedStudio:
    """The studio app under a real uvicorn server on a free loopback port, in a thread."""

    def __init__(self, app):
        import uvicorn

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> "ServedStudio":
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the studio server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)


@pytest.fixture
def shots(tmp_path) -> Path:
    folder = Path(os.environ.get("STUDIO_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def browser_page(tmp_path):
    with playwright_api.sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 800},
        )
        try:
            page = context.new_page()
            page.set_default_timeout(15_000)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
            yield page, errors
        finally:
            context.close()


@pytest.mark.slow
def test_filter_open_an_episode_follow_a_memory_and_quarantine_it(studio_home, browser_page, shots):
    page, errors = browser_page
    settings = load_settings({"home": str(studio_home)})
    studio = Studio(settings, results=[studio_home.parent / "results"])
    with ServedStudio(create_app(studio)) as served:
        page.goto(served.url + "/memories")
        assert "5 episode(s)" in page.inner_text("#result-count")
        page.select_option("select[name=outcome]", "failure")
        page.click("#apply-filters")
        page.wait_for_url("**/memories?*outcome=failure*")
        assert f"{N_FAILED} episode(s)" in page.inner_text("#result-count")
        assert page.locator("#records tbody tr").count() == N_FAILED
        page.screenshot(path=str(shots / "studio-memory.png"), full_page=True)

        page.locator("input.pick").first.check()
        page.click("#bulk button[data-action=delete]")
        assert page.locator("#confirm").is_visible() and "for good" in page.inner_text("#confirm-text")
        page.click("#confirm-no")
        assert page.locator("#confirm").is_hidden()

        page.goto(served.url + "/")
        page.screenshot(path=str(shots / "studio-runs.png"), full_page=True)
        for box in page.locator("#runs input[name=run]").all():
            box.check()
        page.click("#compare-form button[type=submit]")
        page.wait_for_url("**/compare?run=*")
        assert page.locator("#compared tbody tr").count() == 2 and page.locator("#pairs tbody tr").count() == 1
        page.go_back()
        failed_run = page.locator("#runs tbody tr").first  # newest first: the run of failures
        failed_run.locator("a").first.click()
        page.wait_for_url("**/runs/*")
        assert page.locator("#run-curve polyline").count() >= 1
        page.screenshot(path=str(shots / "studio-run.png"), full_page=True)

        page.click("#episodes tbody tr >> nth=0 >> a")
        page.wait_for_url("**/episodes/0")
        assert "decided by" in page.inner_text("#step-0")
        page.screenshot(path=str(shots / "studio-episode.png"), full_page=True)

        link = page.locator('#step-0 a.memory-link[href^="/memories/ep:"]').first
        memory_id = link.inner_text()
        link.click()
        page.wait_for_url(f"**/memories/{memory_id}")
        assert page.inner_text("h1") == memory_id and page.inner_text("#record-tier") == "regular"
        page.click("#quarantine")
        playwright_api.expect(page.locator("#record-tier")).to_have_text("quarantine")
        assert "human edit (studio)" in page.inner_text("#history")
        page.screenshot(path=str(shots / "studio-record.png"), full_page=True)

        page.goto(served.url + "/map?color=outcome")
        page.wait_for_selector("#map[data-ready='1']")
        assert page.locator("#map-svg circle").count() == 5
        page.screenshot(path=str(shots / "studio-map.png"), full_page=True)

        page.goto(served.url + "/experiments/keyroom-key")
        page.wait_for_selector("#experiment-curve polyline")
        drawn = page.locator("#experiment-curve g[data-series]").count()
        page.locator("#arm-toggles button").first.click()
        assert page.locator("#experiment-curve g[data-series]").count() == drawn - 1
        page.screenshot(path=str(shots / "studio-experiment.png"), full_page=True)
    assert not errors, errors

    r = invoke("memory", "show", memory_id, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["tier"] == "quarantine"
    r = invoke("memory", "ls", "--tier", "quarantine", "--json")
    assert [e["id"] for e in json.loads(r.stdout)] == [memory_id]
    assert {p.name for p in shots.iterdir()} >= {"studio-memory.png", "studio-runs.png", "studio-episode.png"}


def open_served(home: Path) -> "ServedStudio":
    studio = Studio(load_settings({"home": str(home)}), results=[home.parent / "results"])
    return ServedStudio(create_app(studio))


@pytest.mark.slow
def test_clicking_a_point_of_the_map_opens_that_memory(studio_home, browser_page, shots):
    page, errors = browser_page
    with open_served(studio_home) as served:
        page.goto(served.url + "/map?color=tier")
        page.wait_for_selector("#map[data-ready='1']")
        assert "5 of 5 records" in page.inner_text("#map-caption")
        box = page.locator("#map-svg circle").nth(2).bounding_box()
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        # near-identical episodes may lie on top of each other: the point clicked is the one drawn on top there
        wanted = page.evaluate("([x, y]) => document.elementFromPoint(x, y).getAttribute('data-id')", [x, y])
        assert wanted and wanted.startswith("ep:keyroom:")
        page.mouse.click(x, y)
        page.wait_for_url(lambda url: unquote(url).endswith(f"/memories/{wanted}"))
        assert page.inner_text("h1") == wanted and page.inner_text("#record-tier") == "regular"
        assert page.locator("#history tbody tr").first.inner_text().split("\t")[2] == "ingest"
        page.screenshot(path=str(shots / "studio-map-click.png"), full_page=True)
    assert not errors, errors


def live_run(home: Path) -> tuple[str, Path, list[dict]]:
    """A copy of the fixture's run of failures that says it is running, its log holding the first
    episode and the start and first step of the second; returns its id, log and the rest of its lines."""
    runs = sorted(p for p in (home / "runs").iterdir() if (p / "run.json").exists())
    source = runs[-1]  # the run of failures (run ids sort by time)
    live, lines = running_copy(source, home)
    order = sorted({line["episode_id"] for line in lines})
    lines.sort(key=lambda line: order.index(line["episode_id"]))  # episode by episode (stable: events in order)
    first_end = next(i for i, line in enumerate(lines) if line["event"] == "end")
    second_step = first_end + 2  # the second episode's start, then its first step
    assert [line["event"] for line in lines[first_end + 1 : second_step + 1]] == ["start", "step"]
    log = live / "episodes.jsonl"
    log.write_text("".join(json.dumps(line) + "\n" for line in lines[: second_step + 1]))
    return live.name, log, lines[second_step + 1 :]


@pytest.mark.slow
def test_a_running_runs_progress_changes_in_the_page_as_its_log_grows(studio_home, browser_page, shots):
    page, errors = browser_page
    run_id, log, rest = live_run(studio_home)
    steps_at_start = 3 + 1  # the first episode's three, the second's first
    with open_served(studio_home) as served:
        page.goto(f"{served.url}/runs/{run_id}")
        assert page.inner_text("#run-status") == "running"
        assert page.inner_text("#progress").startswith(f"1 of {N_FAILED} episodes finished")
        progress = page.locator("#progress")
        playwright_api.expect(progress).to_contain_text(f"1 running, {steps_at_start} steps logged", timeout=10_000)
        assert page.locator("#episodes tbody tr").count() == 2

        assert rest[0]["event"] == "step"
        with log.open("a") as f:
            f.write(json.dumps(rest[0]) + "\n")  # one more step: the page updates in place
        playwright_api.expect(progress).to_contain_text(f"{steps_at_start + 1} steps logged", timeout=10_000)
        page.screenshot(path=str(shots / "studio-run-live.png"), full_page=True)

        with log.open("a") as f:
            f.write("".join(json.dumps(line) + "\n" for line in rest[1:]))  # the run's other episodes end
        playwright_api.expect(progress).to_contain_text(f"{N_FAILED} of {N_FAILED} episodes finished", timeout=10_000)
        assert page.locator("#episodes tbody tr").count() == N_FAILED  # the page reloaded with them
    assert not errors, errors


@pytest.mark.slow
def test_another_namespace_is_browsed_and_curated_in_the_page(studio_home, shared_embedder, browser_page, shots):
    page, errors = browser_page
    add_namespace(studio_home, shared_embedder, "bob")
    with open_served(studio_home) as served:
        page.goto(served.url + "/memories")
        assert page.inner_text("#namespace-shown") == "crl"
        page.select_option("select[name=namespace]", "bob")
        page.select_option("select[name=outcome]", "failure")
        page.click("#apply-filters")
        page.wait_for_url("**/memories?*namespace=bob*")
        assert page.inner_text("#namespace-shown") == "bob"
        assert f"{N_FAILED} episode(s)" in page.inner_text("#result-count")
        assert {t.inner_text() for t in page.locator("#records tbody td.tier-quarantine").all()} == {"quarantine"}
        page.screenshot(path=str(shots / "studio-namespace.png"), full_page=True)

        link = page.locator("#records tbody tr a").first
        memory_id = link.inner_text()
        link.click()
        page.wait_for_url(f"**/memories/{memory_id}?namespace=bob")
        page.click("#record-actions button[data-action=release]")
        playwright_api.expect(page.locator("#record-tier")).to_have_text("regular")
        assert "human edit (studio)" in page.inner_text("#history")
        page.goto(served.url + f"/memories/{memory_id}")  # the same id in the default namespace: untouched
        assert page.inner_text("#record-tier") == "regular" and "human edit (studio)" not in page.inner_text("#history")
    assert not errors, errors

    shown = json.loads(invoke("--namespace", "bob", "memory", "show", memory_id, "--json").stdout)
    assert shown["tier"] == "regular"
