"""`planfence ui` in a real headless Chromium: the plan page draws the graph with the stale
version marked, and clicking that version leads to its key's history.

Chromium comes from the system (Debian's `chromium` package, which `.ci/run` installs); the
test skips when it is missing, except under CI, where it fails.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn
from ui_world import MEMORY, World, busy, stale_then_replan

from planfence.adapters.ui import create_app
from planfence.shared_memory import Store, open_store

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str:
    found = os.environ.get("PLANFENCE_CHROMIUM") or shutil.which("chromium")
    found = found or shutil.which("chromium-browser")
    if found is None:
        reason = "no Chromium: apt-get install chromium (or set PLANFENCE_CHROMIUM)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return found


@contextmanager
def serving(store: Store) -> Iterator[str]:
    """`planfence ui`'s app over `store` on a free port; yields its base URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(create_app(store), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "the UI server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture
def served(sqlite_url: str) -> Iterator[tuple[str, World]]:
    with open_store(sqlite_url) as store:
        world = stale_then_replan(store)
        with serving(store) as base:
            yield base, world


def test_plan_page_marks_stale_and_a_click_opens_the_key(
    served: tuple[str, World], tmp_path: Path
) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    base, world = served
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 900, "height": 700})
            page.goto(f"{base}/plans/{world.old_plan[:12]}")
            stale = page.locator("svg.lineage g.stale")
            assert stale.count() == 1
            assert stale.get_attribute("data-key") == "order/7"
            assert page.locator("svg.lineage g.root").count() == 1
            assert page.locator("svg.lineage line.edge").count() == 2
            # the stale box is drawn red: the style sheet shipped with the app applies
            stroke = stale.locator("rect").evaluate("r => getComputedStyle(r).stroke")
            assert stroke == "rgb(179, 38, 30)"
            shot = os.environ.get("PLANFENCE_UI_SCREENSHOT") or str(tmp_path / "plan.png")
            page.screenshot(path=shot, full_page=True)
            assert Path(shot).stat().st_size > 1000
            stale.click()
            page.wait_for_url(f"{base}/keys/order/7")
            rows = page.locator("table.history tr")
            assert rows.count() == 3  # header + two versions, newest first
            assert world.order_now[:12] in rows.nth(1).inner_text()
            assert world.order_used[:12] in rows.nth(2).inner_text()
        finally:
            browser.close()


def test_a_first_day_in_the_browser(sqlite_url: str) -> None:
    """History from the change feed, stale values side by side with the way forward, Janus
    memories as text, refusals' messages and the decision log's next page."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    found = busy(sqlite_url)
    w = found.world
    with open_store(sqlite_url) as store, serving(store) as base, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1100, "height": 800})
            page.goto(f"{base}/keys/notes/team")  # three `memory put`s, no --parents
            rows = page.locator("table.history tr")
            assert rows.count() == 4
            for n, rid in enumerate(reversed(found.notes), 1):
                assert rid[:12] in rows.nth(n).inner_text()

            page.goto(f"{base}/plans/{w.old_plan[:12]}")
            table = page.locator("table.stale-values")
            assert "confirmed" in table.locator(".del").inner_text()
            assert "changed" in table.locator(".ins").inner_text()
            red = table.locator(".del").evaluate("d => getComputedStyle(d).backgroundColor")
            green = table.locator(".ins").evaluate("d => getComputedStyle(d).backgroundColor")
            assert red == "rgb(253, 236, 235)" and green == "rgb(230, 244, 234)"
            page.locator("p.superseded a").click()
            page.wait_for_url(f"{base}/plans/{w.plan}")
            assert "Every version this plan used is still its key's head." in page.content()

            page.goto(f"{base}/keys/team/memory")
            memories = page.locator("div.memory")
            assert memories.count() == 2
            assert memories.nth(0).inner_text() == MEMORY  # text, its line break kept

            page.goto(f"{base}/")
            messages = page.locator("td.message")
            assert messages.nth(0).inner_text() == "the call carries no plan reference"
            page.locator("a.older").click()
            page.wait_for_load_state()
            assert "before=" in page.url
            text = page.locator("table.decisions").inner_text()
            assert "plan was derived from outdated versions of order/7; replan once" in text
            assert page.locator("a.older").count() == 0
        finally:
            browser.close()


AT_CELLS = "table.decisions td:first-child, table.history td:nth-child(4)"
ONE_LINE = """cells => cells.map(cell => {
    const range = document.createRange();
    range.selectNodeContents(cell);
    const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
    return tops.size;
})"""


def test_timestamps_stay_on_one_line(sqlite_url: str) -> None:
    """On a narrow window the tables squeeze their columns, but a time is never broken."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    found = busy(sqlite_url)
    with open_store(sqlite_url) as store, serving(store) as base, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 700, "height": 800})
            for path in ("/", f"/plans/{found.world.plan}", "/keys/notes/team"):
                page.goto(f"{base}{path}")
                cells = page.locator(AT_CELLS)
                assert cells.count() > 0, path
                lines = cells.evaluate_all(ONE_LINE)
                assert set(lines) == {1}, (path, lines)
        finally:
            browser.close()
