"""The README's store, gate and Janus snippets run as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"


def python_blocks(heading: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"### {heading}\n")
    end = text.find("\n### ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start : end if end != -1 else None], re.S)


def run(code: str, cwd: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_store_snippet(tmp_path: Path) -> None:
    [code] = python_blocks("The shared memory store")
    run(code, tmp_path)
    assert (tmp_path / ".planfence" / "memory.db").exists()


def test_gate_snippet(tmp_path: Path) -> None:
    code = python_blocks("The gate")[0]
    out = run(code, tmp_path)
    assert "shipping to 9 Hill Rd" in out
    assert "['replan', 'allow']" in out


def test_janus_snippet(tmp_path: Path) -> None:
    [code] = python_blocks("The Janus controller")
    lines = run(code, tmp_path).splitlines()
    assert len(lines) == 30
    assert any("compared on" in line for line in lines)


@pytest.mark.parametrize("heading", ["Set up"])
def test_setup_has_exactly_two_commands(heading: str) -> None:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"## {heading}\n")
    section = text[start : text.index("\n## ", start + 1)]
    commands = re.findall(r"```bash\n(.*?)```", section, re.S)
    assert [c.count("\n") for c in commands] == [1, 1]
    ci = (README.parent / ".ci" / "run").read_text()
    assert commands[0].strip() in ci
    assert commands[1].strip() in ci
