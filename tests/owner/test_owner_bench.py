"""Smoke run of `planfence bench gate --quick`: the JSON has the documented shape.

Numbers are not checked (they depend on the machine); only that every row is there and sane.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planfence.adapters.cli.main import main

ROW_FIELDS = {
    "heads_from",
    "deps",
    "depth",
    "allow_p50_ms",
    "allow_p99_ms",
    "bare_read_p50_ms",
    "ratio_p50",
    "default_audit",
    "durable_p50_ms",
    "durable_ratio_p50",
    "no_audit_p50_ms",
    "deferred_p50_ms",
    "deferred_ratio_p50",
    "no_audit_ratio_p50",
    "audit_unavailable",
}
TRAFFIC_FIELDS = {"keys", "deps", "planfence_bytes", "allkeys_bytes"}
SIGNING_FIELDS = {"what", "keys", "hmac_p50_us", "ed25519_p50_us", "added_us", "ratio_p50"}


def test_bench_gate_quick_writes_the_documented_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "gate.json"
    assert main(["bench", "gate", "--quick", "--repeat", "3", "--out", str(out)]) == 0
    data = json.loads(out.read_text())
    printed = capsys.readouterr().out
    assert set(data) == {
        "rows",
        "traffic",
        "stores",
        "notes",
        "repeat",
        "traffic_repeat",
        "interrupted",
        "telemetry",
        "signing",
        "peer",
    }
    assert data["repeat"] == 3 and data["interrupted"] is False
    assert data["stores"][0]["backend"] == "sqlite"

    for row in data["rows"]:
        assert set(row) == ROW_FIELDS
        assert row["heads_from"] in {"sqlite", "sqlite/loop", "postgres", "http"}
        assert row["allow_p50_ms"] > 0 and row["allow_p99_ms"] >= row["allow_p50_ms"]
        assert row["bare_read_p50_ms"] > 0 and row["ratio_p50"] > 0
    grid = {(r["heads_from"], r["deps"], r["depth"]) for r in data["rows"]}
    for source in ("sqlite", "sqlite/loop", "http"):
        assert {(d, n) for s, d, n in grid if s == source} == {
            (d, n) for d in (1, 4, 16) for n in (1, 10, 100)
        }
    assert all(r["default_audit"] in {"durable", "deferred"} for r in data["rows"])

    # beside agent-coherence's effect gate, on the same kind of backend, at 1, 4 and 16 keys
    peer = {(t["backend"], t["keys"]) for t in data["peer"]}
    assert peer == {(b, n) for b in ("memory", "sqlite", "sqlite/loop") for n in (1, 4, 16)}
    for t in data["peer"]:
        assert t["planfence_p50_us"] > 0 and t["agent_coherence_p50_us"] > 0
        assert t["ratio_p50"] == pytest.approx(
            t["planfence_p50_us"] / t["agent_coherence_p50_us"], rel=0.01
        )
    assert "agent-coherence" in printed
    if not any(s == "postgres" for s, _, _ in grid):
        assert "PostgreSQL rows skipped" in printed
    else:
        assert [s["backend"] for s in data["stores"]] == ["sqlite", "postgres"]

    # the instrumentation's cost, side by side: no provider vs an OpenTelemetry SDK
    assert [(t["deps"], t["depth"]) for t in data["telemetry"]] == [(4, 1), (4, 10), (4, 100)]
    for t in data["telemetry"]:
        assert t["no_provider_p50_ms"] > 0 and t["sdk_provider_p50_ms"] > 0
        assert t["ratio_p50"] > 0

    # per check of 4 keys, HMAC beside Ed25519: the owner's answer round, and the heads a gate
    # reads from an untrusted store, verified at first sight and remembered afterwards
    signing = {t["what"]: t for t in data["signing"]}
    assert list(signing) == [
        "owner_answer",
        "store_heads_first",
        "store_heads_remembered",
        "owner_chain_first",
    ]
    for t in data["signing"]:
        assert set(t) == SIGNING_FIELDS and t["keys"] == 4
        assert t["hmac_p50_us"] > 0 and t["ed25519_p50_us"] > 0 and t["ratio_p50"] > 0
        assert t["added_us"] == pytest.approx(t["ed25519_p50_us"] - t["hmac_p50_us"], abs=0.11)
    for label in (
        "owner answer",
        "store heads, first sight",
        "store heads, remembered",
        "owner chain (3), first",
    ):
        assert label in printed

    sizes = {(t["keys"], t["deps"]) for t in data["traffic"]}
    assert {k for k, _ in sizes} == {8, 32, 128}
    for t in data["traffic"]:
        assert set(t) == TRAFFIC_FIELDS
        assert t["deps"] < t["keys"]
        assert 0 < t["planfence_bytes"] < t["allkeys_bytes"]
