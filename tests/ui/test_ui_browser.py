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
from pathlib import Path

import pytest
import uvicorn
from ui_world import World, stale_then_replan

from planfence.adapters.ui import create_app
from planfence.shared_memory import open_store

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


@pytest.fixture
def served(sqlite_url: str) -> Iterator[tuple[str, World]]:
    with open_store(sqlite_url) as store:
        world = stale_then_replan(store)
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
            yield f"http://127.0.0.1:{port}", world
        finally:
            server.should_exit = True
            thread.join(timeout=10)


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
