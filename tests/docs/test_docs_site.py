"""The built documentation site: `mkdocs build --strict` passes, the Python API reference shows
every public name and nothing private, `llms.txt` is published, and the pages render in a real
headless Chromium with their navigation and search.

The site is built once for this module. Set `PLANFENCE_DOCS_SITE` to a folder built before
(`mkdocs build --strict -d FOLDER`) to test that one instead, and `PLANFENCE_DOCS_SCREENSHOTS`
to a folder to keep the browser's screenshots in (by default they go to a temporary folder).
Without MkDocs installed (`pip install 'planfence[docs]'`) or without Chromium, the tests skip,
except under CI, where they fail.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
API_PAGES = REPO / "docs" / "reference" / "api"
SNAPSHOT = REPO / "tests" / "api" / "public_api.txt"
BUILD_TIME_LIMIT_S = 900
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get("PLANFENCE_DOCS_SITE")
    if given:
        return Path(given)
    if importlib.util.find_spec("mkdocs") is None:
        unavailable("MkDocs is not installed: pip install 'planfence[docs]'")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=BUILD_TIME_LIMIT_S,
        env=env,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr[-4000:]}"
    return out


# ---- the API reference


def snapshot() -> dict[str, dict[str, set[str]]]:
    """Package -> each public name -> its public members, from the public API snapshot."""
    found: dict[str, dict[str, set[str]]] = {}
    names: dict[str, set[str]] = {}
    last = ""
    for line in SNAPSHOT.read_text().splitlines():
        head = re.match(r"## (\S+) \(\d+\)$", line)
        if head:
            names = found.setdefault(head.group(1), {})
        elif line.startswith("    "):
            m = re.match(r"(?:async def |def |property )?(\w+)", line.strip())
            assert m, line
            names[last].add(m.group(1))
        elif line.strip():
            m = re.match(r"(?:class |async def |def |module )?(\w+)", line)
            assert m, line
            last = m.group(1)
            names[last] = set()
    return found


def test_each_public_package_has_one_page_and_the_index_lists_them() -> None:
    packages = set(snapshot())
    pages = {p.stem for p in API_PAGES.glob("*.md")} - {"index"}
    assert pages == packages, pages ^ packages
    index = (API_PAGES / "index.md").read_text(encoding="utf-8")
    for package in packages:
        text = (API_PAGES / f"{package}.md").read_text(encoding="utf-8")
        assert re.findall(r"^::: (\S+)$", text, re.M) == [package]
        assert f"({package}.md)" in index, package
        members = re.search(r"^\s+members:\n((?:\s+- \S+\n)+)", text, re.M)
        if members:  # a module that defines more than it exports lists its `__all__`
            listed = set(re.findall(r"- (\S+)", members.group(1)))
            assert listed == set(snapshot()[package]), package


def test_the_built_reference_shows_every_public_name_and_nothing_private(site: Path) -> None:
    for package, names in snapshot().items():
        html = (site / "reference" / "api" / package / "index.html").read_text(encoding="utf-8")
        ids = set(re.findall(r'<h\d id="([^"]+)" class="doc doc-heading', html))
        assert ids, package
        shown = {i.removeprefix(f"{package}.") for i in ids}
        top = {s for s in shown if "." not in s}
        assert top == set(names), (package, top ^ set(names))
        for name, members in names.items():
            for member in members - {"__init__"}:  # the class heading shows its signature
                assert f"{name}.{member}" in shown, (package, name, member)
        private = [i for i in shown if any(p.startswith("_") for p in i.split("."))]
        assert set(private) <= {
            f"{n}.{d}"
            for n in names
            for d in ("__call__", "__enter__", "__exit__", "__aenter__", "__aexit__")
        }, private
        assert "doc-signature" in html  # signatures are shown


def test_llms_txt_is_published(site: Path) -> None:
    text = (site / "llms.txt").read_text(encoding="utf-8")
    assert text.startswith("# planfence")
    for page in ("getting-started", "reference/cli", "reference/policy", "reference/wire"):
        assert f"{page}/index.md" in text or f"{page}.md" in text, page
    full = (site / "llms-full.txt").read_text(encoding="utf-8")
    assert "class Gate" in full or "Gate" in full
    assert len(full) > len(text)


# ---- the site in a browser


def chromium() -> str:
    found = os.environ.get("PLANFENCE_CHROMIUM") or shutil.which("chromium")
    found = found or shutil.which("chromium-browser")
    if found is None:
        unavailable("no Chromium: apt-get install chromium (or set PLANFENCE_CHROMIUM)")
    assert found
    return found


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The built site over HTTP on a free port (search loads its index with fetch, which a
    file:// page may not)."""
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    kept = os.environ.get("PLANFENCE_DOCS_SCREENSHOTS")
    folder = Path(kept) if kept else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return folder


PAGES = {
    "index": "/",
    "getting-started": "/getting-started/",
    "api-gate": "/reference/api/planfence.plugins.gate/#planfence.plugins.gate.Gate",
}


def test_the_site_renders_with_navigation_and_search(served: str, shots: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    executable = chromium()
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            for name, path in PAGES.items():
                page.goto(served + path)
                page.wait_for_load_state("networkidle")
                # the theme's style sheet applies: the header bar is drawn, not unstyled text
                header = page.locator("header.md-header")
                assert header.count() == 1, name
                assert header.evaluate("h => getComputedStyle(h).position") == "sticky", name
                # navigation: the primary sidebar lists the site's sections
                nav = page.locator("nav.md-nav--primary")
                assert nav.count() >= 1, name
                labels = nav.first.inner_text()
                for section in ("Getting started", "Reference", "Python API"):
                    assert section in labels, (name, section)
                assert page.locator("nav.md-nav--primary a.md-nav__link").count() > 20, name
                # search: the box is there, and a query finds pages
                assert page.locator("input.md-search__input").count() == 1, name
                page.screenshot(path=str(shots / f"{name}.png"), full_page=False)
                assert (shots / f"{name}.png").stat().st_size > 10_000, name
            # on the API page of Gate: its heading, its signature and its methods
            gate = page.locator('[id="planfence.plugins.gate.Gate"]')
            assert gate.count() == 1 and "Gate" in gate.inner_text()
            assert page.locator('[id="planfence.plugins.gate.Gate.check"]').count() == 1
            assert "def check" in page.content() or "check" in page.content()
            # search from the API page: type a query, see results that link into the site
            box = page.locator("input.md-search__input")
            box.click()
            box.press_sequentially("fencing", delay=50)
            results = page.locator("li.md-search-result__item")
            results.first.wait_for(timeout=20_000)
            assert results.count() > 0
            page.screenshot(path=str(shots / "search.png"))
            assert not errors, errors
        finally:
            browser.close()
