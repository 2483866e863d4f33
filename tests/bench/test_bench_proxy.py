"""`planfence bench proxy`, run as users run it: every path measured in one run (FastMCP's proxy
beside ours, and a raw line relay), stdout carries only the JSON and stderr only its progress (the
servers' logs go to a file). One run of the benchmark serves every test here."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from planfence.demos.bench.proxy import _show


def planfence(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "planfence.adapters.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def run(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """One run with `--json` and `--out FILE`: what it printed, and what it wrote."""
    out = tmp_path_factory.mktemp("bench-proxy") / "bench.json"
    done = planfence(
        "bench", "proxy", "--repeat", "5", "--warmup", "2", "--cold-starts", "1", "--json",
        "--out", str(out),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done, json.loads(out.read_text())


def test_bench_proxy_smoke(
    run: tuple[subprocess.CompletedProcess[str], dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    done, data = run
    timings = {
        "direct_p50_ms",
        "direct_p99_ms",
        "relay_p50_ms",
        "relay_p99_ms",
        "ungated_p99_ms",
        "proxied_p50_ms",
        "proxied_p99_ms",
        "ungated_p50_ms",
        "ratio_p50",
        "inprocess_p50_ms",
        "inprocess_ratio_p50",
        "inprocess_durable_p50_ms",
        "inprocess_durable_ratio_p50",
        "fastmcp_p50_ms",
        "fastmcp_p99_ms",
    }
    added = {"proxied_added_p50_ms", "fastmcp_added_p50_ms", "added_vs_fastmcp_p50"}
    added |= {"relay_added_p50_ms", "ungated_added_p50_ms", "added_vs_relay_p50"}
    assert set(data) == {
        *timings,
        *added,
        "cold_start_ms",
        "calls",
        "warmup",
        "stores",
        "interrupted",
    }
    assert set(data["cold_start_ms"]) == {"direct", "proxy"}
    assert all(v > 0 for v in data["cold_start_ms"].values())
    assert data["calls"] == 5 and data["warmup"] == 2 and data["interrupted"] is False
    assert all(data[k] > 0 for k in timings)
    # The added latencies are differences against the direct call of the same run.
    assert data["proxied_added_p50_ms"] == round(data["proxied_p50_ms"] - data["direct_p50_ms"], 4)
    assert data["fastmcp_added_p50_ms"] == round(data["fastmcp_p50_ms"] - data["direct_p50_ms"], 4)
    assert data["relay_added_p50_ms"] == round(data["relay_p50_ms"] - data["direct_p50_ms"], 4)
    # One throwaway store per gated server (the proxy, the in-server gate, and its deferred twin),
    # each removed afterwards.
    assert [s["backend"] for s in data["stores"]] == ["sqlite"] * 3
    assert len({s["url"] for s in data["stores"]}) == 3
    assert json.loads(done.stdout) == data  # stdout is nothing but the JSON it wrote
    _show(data)  # the table the command prints without --json
    table = capsys.readouterr().out
    assert "ratio proxied/direct" in table and "in-server gate" in table
    assert "FastMCP proxy" in table and "raw line relay" in table


def test_bench_proxy_progress_is_not_mixed_with_server_logs(
    run: tuple[subprocess.CompletedProcess[str], dict[str, Any]],
) -> None:
    """The gated servers log (at start, say); none of it may land between the progress lines."""
    done, _ = run
    lines = done.stderr.splitlines()
    assert lines, "no progress at all"
    assert [line for line in lines if not line.startswith("bench proxy: ")] == []
    assert lines[-1] == "bench proxy: 7/7 call 5/5"  # 2 warm-up calls, then 5 timed
