"""The guide pages' code blocks run, and say what really happens.

- docs/getting-started.md runs whole, in order, in an empty folder, as a reader types it: its
  files are saved under the names the page gives, its shell blocks run in one shell session
  (variables carry over), and each output block the page shows is what the command before it
  printed, with record ids, times and the folder's path matched rather than compared.
- docs/troubleshooting.md has an entry for every refusal reason the code can give, and the
  error lines it quotes are the ones planfence prints.
- docs/concepts.md's diagram and statements name real verdicts and reasons.
- docs/operating/upgrades.md names the schema version the code migrates to.
- docs/contributing.md gives the commands CI runs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from docpages import REPO, Block, block, page_blocks

TIME_LIMIT_S = 120
BIN = Path(sys.executable).parent  # the venv's `planfence` and `python`, as after activation

# ---- docs/getting-started.md

TOUR = "docs/getting-started.md"
# The files the tutorial asks the reader to save: (heading, lang) -> file name.
TOUR_FILES = {
    ("Say what the tool depends on", "toml"): "policy.toml",
    ("Book through the gate", "python"): "book.py",
}
INSTALL = "Install"

HEX64 = re.compile(r"\b[0-9a-f]{64}\b")
HEX12 = re.compile(r"\b[0-9a-f]{12}\b")
TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z\b")


def tour_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLANFENCE_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = str(home)
    env.pop("VIRTUAL_ENV", None)
    return env


def steps() -> list[tuple[Block, Block | None]]:
    """The page's blocks in order, each with the output block that follows it (if any)."""
    blocks = page_blocks(TOUR)
    out: list[tuple[Block, Block | None]] = []
    for i, b in enumerate(blocks):
        if b.lang == "text":
            continue
        nxt = blocks[i + 1] if i + 1 < len(blocks) else None
        out.append((b, nxt if nxt is not None and nxt.lang == "text" else None))
    return out


class Normaliser:
    """Names each record id by the order it first appears in (a 12-digit prefix as its full id),
    so the page's ids and a run's compare as the same structure: the head printed by a `put` is
    the one the check calls current, and so on."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        self.ids: list[str] = []

    def name(self, hex_id: str) -> str:
        for n, known in enumerate(self.ids):
            if known.startswith(hex_id):
                return f"<id{n}>"
        self.ids.append(hex_id)
        return f"<id{len(self.ids) - 1}>"

    def __call__(self, text: str) -> list[str]:
        text = text.replace(self.folder, "~/planfence-tour")
        text = TIME.sub("<time>", text)
        text = HEX64.sub(lambda m: self.name(m.group(0)), text)
        text = HEX12.sub(lambda m: self.name(m.group(0)), text)
        return [" ".join(line.split()) for line in text.strip().splitlines()]


def test_the_install_block_installs_this_package() -> None:
    """The install block runs here without its `pip install` (the test's own environment has
    planfence installed from this checkout): its name is the package's."""
    code = block(TOUR, INSTALL, "bash")
    assert "pip install planfence\n" in code
    project = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^name = "planfence"$', project, re.M)


def test_getting_started_runs_as_a_reader_types_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    marker = "@@planfence-tour-block@@"
    script = ["set -u"]
    expected: list[tuple[str, Block | None]] = []
    for b, output in steps():
        if b.lang == "bash" and b.heading == INSTALL:
            # The folder and the venv as the reader makes them; planfence itself comes from the
            # environment running this test (on PATH first, as after activation).
            script.append("mkdir ~/planfence-tour && cd ~/planfence-tour")
            continue
        if b.lang == "bash":
            script.append(f"echo {marker}\n{{\n{b.code}\n}} 2>&1")
            expected.append((b.heading, output))
            continue
        name = TOUR_FILES.get((b.heading, b.lang))
        assert name is not None, f"a {b.lang} block under {b.heading!r} the test does not place"
        script.append(f"cat > {name} <<'PLANFENCE_TOUR_EOF'\n{b.code}PLANFENCE_TOUR_EOF")
    proc = subprocess.run(
        ["bash", "-c", "\n".join(script)],
        cwd=home,
        env=tour_env(home),
        capture_output=True,
        text=True,
        timeout=TIME_LIMIT_S,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr == ""
    got = proc.stdout.split(marker + "\n")[1:]
    assert len(got) == len(expected)
    folder = str(home / "planfence-tour")
    page, run = Normaliser(folder), Normaliser(folder)
    for (heading, output), printed in zip(expected, got, strict=True):
        assert "Traceback" not in printed, printed
        assert output is not None, f"the page shows no output for the command under {heading!r}"
        assert run(printed) == page(output.code), f"under {heading!r}"
    # Every id in the page's outputs stood for one the run printed, in the same places.
    assert len(page.ids) == len(run.ids)


def test_getting_started_links_where_next() -> None:
    text = (REPO / TOUR).read_text(encoding="utf-8")
    for target in ("concepts.md", "frameworks/index.md", "troubleshooting.md"):
        assert f"]({target})" in text
