"""Smoke run of `planfence bench link --quick` on a fast synthetic trace: the JSON has its shape.

Numbers are not checked (they depend on the machine); only that every row is there and sane.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planfence.adapters.cli.main import main
from planfence.demos.bench.netem.sources import TRACES_ENV

GATE_FIELDS = {
    "path",
    "keys",
    "deps",
    "planfence_p50_ms",
    "planfence_p95_ms",
    "planfence_bytes",
    "allkeys_p50_ms",
    "allkeys_p95_ms",
    "allkeys_bytes",
    "stall_ratio_p50",
}
SYNC_FIELDS = {
    "path",
    "loss",
    "state_kib",
    "keys",
    "request_bytes",
    "answer_bytes",
    "p50_ms",
    "p95_ms",
}


@pytest.mark.slow
def test_bench_link_quick_writes_the_documented_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    up, down = tmp_path / "fast.up", tmp_path / "fast.down"
    up.write_text("1\n")
    down.write_text("1\n1\n")
    out = tmp_path / "link.json"
    argv = ["bench", "link", "--quick", "--repeat", "2"]
    argv += ["--trace-up", str(up), "--trace-down", str(down), "--delay-ms", "2"]
    argv += ["--loss", "0.05", "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "Gate stall per validation" in printed
    assert "One authenticated head sync" in printed
    assert f"trace: {up} and {down}" in printed

    data = json.loads(out.read_text())
    assert set(data) == {"settings", "gate", "sync", "stores", "interrupted"}
    settings = data["settings"]
    assert settings["trace_kind"] == "file" and settings["repeat"] == 2
    assert settings["trace_up"] == str(up) and settings["trace_down"] == str(down)
    assert settings["delay_ms"] == 2 and settings["loss"] == 0.05 and settings["rto_ms"] == 200
    assert settings["link_up_packets"] > 0 and settings["link_down_packets"] > 0

    grid = {(r["path"], r["keys"], r["deps"]) for r in data["gate"]}
    assert grid == {(p, n, d) for p in ("loopback", "link") for n in (8, 32, 128) for d in (1, 4)}
    for row in data["gate"]:
        assert set(row) == GATE_FIELDS
        for method in ("planfence", "allkeys"):
            assert 0 < row[f"{method}_p50_ms"] <= row[f"{method}_p95_ms"]
        assert 0 < row["planfence_bytes"] < row["allkeys_bytes"]

    paths = {"loopback", "link", "link+loss0.05"}
    assert {(r["path"], r["state_kib"]) for r in data["sync"]} == {
        (p, k) for p in paths for k in (1, 4, 16, 64)
    }
    for row in data["sync"]:
        assert set(row) == SYNC_FIELDS
        assert row["loss"] == (0.05 if row["path"] == "link+loss0.05" else 0.0)
        assert 0 < row["p50_ms"] <= row["p95_ms"]
    answers = {r["state_kib"]: r["answer_bytes"] for r in data["sync"] if r["path"] == "link"}
    assert answers[1] < answers[4] < answers[16] < answers[64]
    assert 0.8 * 64 * 1024 < answers[64] < 1.2 * 64 * 1024


def test_bench_link_with_an_empty_traces_folder_says_how_to_pass_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(TRACES_ENV, str(tmp_path))  # a folder with no traces in it
    assert main(["bench", "link", "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("planfence: error: $PLANFENCE_TRACES is")
    assert "--trace-up FILE --trace-down FILE" in err


def test_bench_link_refuses_a_malformed_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.up"
    bad.write_text("12\nsoon\n")
    assert main(["bench", "link", "--trace-up", str(bad), "--trace-down", str(bad)]) == 2
    assert "not a millisecond count" in capsys.readouterr().err
