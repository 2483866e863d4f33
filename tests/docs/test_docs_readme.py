"""The README: short, its two set-up commands exactly as CI runs them, its example runs and
shows a stale plan refused and replanned, and every link in it leads to a page."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from docpages import block, page_blocks, pages

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
EXAMPLE = "A stale plan, refused and replanned"


def test_the_readme_fits_on_two_screens() -> None:
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 200


def test_setup_has_exactly_two_commands_and_ci_runs_both() -> None:
    commands = [b.code for b in page_blocks("README.md", "bash") if b.heading == "Set up"]
    assert [c.count("\n") for c in commands] == [1, 1]
    ci = (ROOT / ".ci" / "run").read_text()
    assert commands[0].strip() in ci
    assert commands[1].strip() in ci
    # no other command in the README: everything else is on its page
    assert [b.heading for b in page_blocks("README.md", "bash")] == ["Set up", "Set up"]


def test_the_example_refuses_the_stale_plan_and_ships_after_one_replan(tmp_path: Path) -> None:
    code = block("README.md", EXAMPLE)
    assert len(code.splitlines()) <= 35  # one screen
    for _ in range(2):  # users run a snippet again in the same folder
        proc = subprocess.run(
            [sys.executable, "-W", "default", "-c", code],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""
        assert proc.stdout.splitlines() == ["shipping to 9 Hill Rd", "['replan', 'allow']"]


def test_every_relative_link_of_the_readme_leads_to_a_page() -> None:
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    local = [link for link in links if "://" not in link]
    assert local, "the README links into the docs"
    for link in local:
        assert (ROOT / link).exists(), link
    # every page that a README section moved to is linked from it
    linked = {str(Path(link)) for link in local}
    for page in ("docs/gate.md", "docs/frameworks/mcp.md", "docs/janus.md", "docs/benchmarks.md"):
        assert page in linked, page


def test_examples_do_not_assume_uv() -> None:
    for page in pages():
        for line in (ROOT / page).read_text(encoding="utf-8").splitlines():
            if "uvx " in line:
                assert "uv installed" in line or "with uv" in line, (page, line)
