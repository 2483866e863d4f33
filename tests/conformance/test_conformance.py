"""The adapter conformance suite: every registered adapter passes every case (each run as
`python -m planfence.adapters.conformance --adapter NAME --json`, as users run it), and the
cases fail for an agent that acts without the gate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from planfence.adapters.conformance import CASES, Run, Script, World, run_case
from planfence.adapters.conformance.runner import HARNESSES, installed, load
from planfence.plugins.gate.checkers import CheckerFactory
from planfence.shared_memory import MissingExtraError

LETTERS = [c.letter for c in CASES]


def conformance(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "planfence.adapters.conformance", *args],
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ),
    )


@pytest.mark.slow
@pytest.mark.parametrize("adapter", list(HARNESSES))
def test_every_adapter_passes_every_case(adapter: str) -> None:
    try:
        harness = load(adapter)
    except MissingExtraError as exc:  # its harness module imports the framework
        pytest.skip(f"needs pip install 'planfence[{exc.extra}]' (its own CI venv)")
    if not installed(harness):
        pytest.skip(f"needs pip install 'planfence[{harness.extra}]' (its own CI venv)")
    done = conformance("--adapter", adapter, "--json")
    results = json.loads(done.stdout)["results"]
    failed = [
        f"({r['case']}) {r['status']}: {r['detail']}" for r in results if r["status"] != "pass"
    ]
    assert failed == [], "\n".join(failed)
    assert [r["case"] for r in results] == LETTERS
    assert done.returncode == 0, done.stderr


class WithoutGate:
    """An agent that reads the records and calls its tools directly: no gate at all."""

    name: ClassVar[str] = "ungated"
    extra: ClassVar[str] = "all"
    modules: ClassVar[Sequence[str]] = ()
    tool_span: ClassVar[str | None] = None

    async def run(
        self, world: World, script: Script, *, checker: CheckerFactory | None, plans: bool
    ) -> Run:
        run, last = Run(), None
        while True:
            value = await world.store.get(await world.head() or "") if plans else None
            step = await script.next([json.dumps(value.value)] if value else [], last)
            if step is None:
                return run
            last = await world.tools()[step.tool](**step.args)
            run.told.append(last)


async def test_the_cases_fail_for_an_agent_without_the_gate(tmp_path: Path) -> None:
    results = {c.letter: await run_case(WithoutGate(), c, tmp_path) for c in CASES}
    statuses = {letter: r.status for letter, r in results.items()}
    # It acts on whatever it read: only the control's expectation (act on the stale plan) holds.
    assert statuses == {**dict.fromkeys(LETTERS, "FAIL"), "d": "pass"}, results
    assert "Lisbon" in results["b"].detail  # it booked the stale destination


def test_the_table_and_usage_errors() -> None:
    done = conformance("--adapter", "seam", "--quick")
    assert done.returncode == 0, done.stderr
    header, row = done.stdout.splitlines()[:2]
    assert header.split()[1:4] == ["(a)", "(b)", "(c)"] and row.split()[:4] == [
        "seam",
        *["pass"] * 3,
    ]
    bad = conformance("--adapter", "nonesuch")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        f"planfence: error: unknown adapter 'nonesuch' (known: {', '.join(HARNESSES)})"
    ]
    assert conformance("--case", "z").returncode == 2


def test_json_results_name_adapter_case_and_status(tmp_path: Path) -> None:
    out = tmp_path / "out" / "results.json"
    done = conformance("--adapter", "seam", "--case", "a", "--json", "--out", str(out))
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)["results"]
    assert (row["adapter"], row["case"], row["status"]) == ("seam", "a", "pass")
    written: dict[str, Any] = json.loads(out.read_text())
    assert written["results"][0]["case"] == "a"


def test_quiet_by_default_and_verbose_on_request() -> None:
    """The table alone by default (no progress, no logs: the in-server MCP harness sets up the
    SDK's log handler, and every gate notes its unsigned tokens); `-v` shows both."""
    args = ("--adapter", "mcp.in_server", "--case", "a", "--case", "b")
    quiet = conformance(*args)
    assert quiet.returncode == 0, quiet.stdout
    assert quiet.stderr == ""
    assert quiet.stdout.splitlines()[1].split()[:3] == ["mcp.in_server", "pass", "pass"]
    verbose = conformance(*args, "-v")
    assert verbose.returncode == 0, verbose.stdout
    assert "mcp.in_server (b) pass" in verbose.stderr
    assert "no signing key" in verbose.stderr
