"""The official TypeScript MCP client (`@modelcontextprotocol/sdk`, on Node) for the proxy tests.

`ts_client/` is a tiny npm package: `client.mjs` takes a JSON scenario (how to reach the server,
which calls to make) and prints a JSON report. Its dependencies are installed with `npm ci` from
the lockfile, by `.ci/run` or, when missing or older than the lockfile, by the `ts_client` fixture.
Without Node the tests skip, except under CI (`CI=true`), where a missing Node is a failure.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

TS_DIR = Path(__file__).parent / "ts_client"
SCRIPT = TS_DIR / "client.mjs"
_INSTALLED = TS_DIR / "node_modules" / ".package-lock.json"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"{reason} (CI=true: the TypeScript-client tests must run)")
    pytest.skip(reason)


def install() -> str:
    """The `node` executable, with the client's packages installed; skips (fails under CI)
    when Node or npm is missing or the install fails."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        _unavailable("the TypeScript-client tests need Node.js and npm on PATH")
    assert node is not None and npm is not None
    lock = TS_DIR / "package-lock.json"
    # Test processes running side by side (pytest-xdist workers) install one at a time.
    with (TS_DIR / ".install.lock").open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not _INSTALLED.exists() or _INSTALLED.stat().st_mtime < lock.stat().st_mtime:
            done = subprocess.run(
                [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=TS_DIR,
                capture_output=True,
                text=True,
                timeout=600,
            )
            if done.returncode != 0:
                _unavailable(f"npm ci in {TS_DIR} failed: {done.stderr.strip()[-500:]}")
    return node


async def run_client(node: str, scenario: dict[str, Any], limit: float = 180) -> dict[str, Any]:
    """Run one scenario with the TypeScript client; its JSON report."""
    with anyio.fail_after(limit):  # a generous bound: the point is that it finishes
        done = await anyio.run_process(
            [node, str(SCRIPT), json.dumps(scenario)], check=False, stdin=subprocess.DEVNULL
        )
    err = done.stderr.decode(errors="replace")
    assert done.returncode == 0, f"the TypeScript client failed:\n{err[-3000:]}"
    report: dict[str, Any] = json.loads(done.stdout.decode())
    return report
