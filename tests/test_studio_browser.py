"""`crl studio` end to end in a real headless Chromium (Debian's `chromium`, driven by Playwright's
Python package): open the studio on the fixture bank, filter, open an episode, follow a memory
link, quarantine that memory, then check that the CLI sees it quarantined. Screenshots of the
main pages go to the test's folder, or to $STUDIO_SCREENSHOTS when set (docs/images/ for
the README).

Skipped, with the reason shown, only where /usr/bin/chromium or the playwright package is
missing (`apt-get install chromium`, `pip install playwright`; no `playwright install`).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from crl.agent.config import load_settings
from crl.agent.studio import Studio, create_app
from tests.chroma_server import free_port
from tests.studio_fixtures import N_FAILED, invoke, minilm, shared_embedder, studio_built, studio_home  # noqa: F401

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
