"""The README's store, gate and Janus snippets run as written."""

from __future__ import annotations

import json
import re
import shlex
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


def bash_block(heading: str, index: int = 0) -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"### {heading}\n")
    end = text.find("\n### ", start + 1)
    blocks = re.findall(r"```bash\n(.*?)```", text[start : end if end != -1 else None], re.S)
    return [line for line in blocks[index].splitlines() if line.strip()]


# Users paste a snippet, run it, change something and run it again: every snippet runs twice
# against the same store (the same working folder).


def test_store_snippet(tmp_path: Path) -> None:
    [code] = python_blocks("The shared memory store")
    run(code, tmp_path)
    assert (tmp_path / ".planfence" / "memory.db").exists()
    run(code, tmp_path)


def test_store_commands_run_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from planfence.adapters.cli.main import main

    monkeypatch.chdir(tmp_path)  # the commands use the default store, in the working folder
    monkeypatch.delenv("PLANFENCE_STORE", raising=False)
    ids: list[str] = []
    for _ in range(2):
        for line in bash_block("The shared memory store"):
            argv = shlex.split(line)
            assert argv[0] == "planfence"
            argv = argv[1:]
            if "ID" in argv:
                argv[argv.index("ID")] = ids[-1][:8]  # the short form users copy
            code = main(argv)
            out, err = capsys.readouterr()
            assert code == 0, (line, err)
            if argv[1] == "put":
                ids.append(out.strip())
    assert (tmp_path / ".planfence" / "memory.db").exists()


def test_gate_snippet(tmp_path: Path) -> None:
    code = python_blocks("The gate")[0]
    for _ in range(2):
        out = run(code, tmp_path)
        assert "shipping to 9 Hill Rd" in out
        assert "['replan', 'allow']" in out


def test_janus_snippet(tmp_path: Path) -> None:
    [code] = python_blocks("The Janus controller")
    for _ in range(2):
        lines = run(code, tmp_path).splitlines()
        assert len(lines) == 30
        assert any("compared on" in line for line in lines)


def test_janus_store_snippet(tmp_path: Path) -> None:
    [code] = python_blocks("Janus on a LangGraph store")
    for _ in range(2):
        lines = run(code, tmp_path).splitlines()
        assert [line.split()[:2] for line in lines[:3]] == [
            ["deploy", "deploy"],
            ["staging", "deploy"],
            ["deploy", "keep"],
        ]
        assert lines[3] == "['Deploy with make ship.', 'Staging is host alpha-7.']"


def test_examples_do_not_assume_uv() -> None:
    text = README.read_text(encoding="utf-8")
    for line in text.splitlines():
        if "uvx " in line:
            assert "uv installed" in line or "with uv" in line, line


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


def test_adapter_howto_runs_and_touches_no_plugin_internals(tmp_path: Path) -> None:
    [code] = python_blocks("Add a framework adapter")
    imports = re.findall(r"^from (\S+) import", code, re.M)
    assert set(imports) <= {
        "planfence.adapters.base",
        "planfence.plugins.gate",
        "planfence.shared_memory",
    }
    out = run(code, tmp_path).splitlines()
    assert out[0] == "booked a flight to Lisbon"
    assert out[1].startswith("planfence refused book_flight")
    assert "trip/7/requirements changed" in out[2]


def test_gate_snippet_on_the_default_store_records_its_allow(tmp_path: Path) -> None:
    # Run as a user does who takes the comment's advice (the default SQLite file), then reads
    # the audit log from another process: both decisions are there, and nothing is said on
    # stderr (no allow lost, no gate left unclosed).
    code = python_blocks("The gate")[0]
    assert 'open_async_store("memory://")' in code
    code = code.replace('open_async_store("memory://")', "open_async_store()")
    proc = subprocess.run(
        [sys.executable, "-W", "default", "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    audit = subprocess.run(
        [sys.executable, "-m", "planfence.adapters.cli", "audit", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert audit.returncode == 0, audit.stderr
    rows = json.loads(audit.stdout)
    rows = rows["decisions"] if isinstance(rows, dict) else rows
    assert sorted(r["verdict"] for r in rows) == ["allow", "replan"]
