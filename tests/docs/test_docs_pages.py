"""The store, gate, Janus and adapter-authoring pages' snippets run as written."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from docpages import block


def run(code: str, cwd: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# Users paste a snippet, run it, change something and run it again: every snippet runs twice
# against the same store (the same working folder).

STORE = ("docs/operating/store.md", "The shared memory store")
STORE_CLI = ("docs/operating/store.md", "From the command line")
GATE = ("docs/gate.md", "Using the gate")


def test_store_snippet(tmp_path: Path) -> None:
    code = block(*STORE)
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
        for line in block(*STORE_CLI, "bash").splitlines():
            if not line.strip():
                continue
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
    code = block(*GATE)
    for _ in range(2):
        out = run(code, tmp_path)
        assert "shipping to 9 Hill Rd" in out
        assert "['replan', 'allow']" in out


def test_gate_snippet_on_the_default_store_records_its_allow(tmp_path: Path) -> None:
    # Run as a user does who takes the comment's advice (the default SQLite file), then reads
    # the audit log from another process: both decisions are there, and nothing is said on
    # stderr (no allow lost, no gate left unclosed).
    code = block(*GATE)
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


def test_janus_snippet(tmp_path: Path) -> None:
    code = block("docs/janus.md", "The Janus controller")
    for _ in range(2):
        lines = run(code, tmp_path).splitlines()
        assert len(lines) == 30
        assert any("compared on" in line for line in lines)


def test_janus_store_snippet(tmp_path: Path) -> None:
    code = block("docs/janus.md", "Janus on a LangGraph store")
    for _ in range(2):
        lines = run(code, tmp_path).splitlines()
        assert [line.split()[:2] for line in lines[:3]] == [
            ["deploy", "deploy"],
            ["staging", "deploy"],
            ["deploy", "keep"],
        ]
        assert lines[3] == "['Deploy with make ship.', 'Staging is host alpha-7.']"


def test_adapter_howto_runs_and_touches_no_plugin_internals(tmp_path: Path) -> None:
    code = block("docs/frameworks/write-an-adapter.md", "Add a framework adapter")
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
