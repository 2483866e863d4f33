"""Smoke run of `planfence bench scale --quick`: every axis is measured in one run and the JSON
has the documented shape; the plot is drawn; the user's default store is never touched.

Numbers are not checked (they depend on the machine); only that every row is there and sane.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planfence.adapters.cli.main import main


def test_bench_scale_quick_measures_every_axis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    user_store = tmp_path / "mine" / "memory.db"
    monkeypatch.setenv("PLANFENCE_STORE", f"sqlite:///{user_store}")
    monkeypatch.setenv("PLANFENCE_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:1/test")
    out, figure = tmp_path / "scale.json", tmp_path / "plots" / "scale.png"
    argv = ["bench", "scale", "--quick", "--repeat", "3", "--seconds", "0.2"]
    assert main([*argv, "--out", str(out), "--plot", str(figure)]) == 0
    printed = capsys.readouterr()
    data = json.loads(out.read_text())
    assert not user_store.exists() and not (tmp_path / ".planfence").exists()
    assert [s["backend"] for s in data["stores"]] == ["sqlite"]
    assert "PostgreSQL rows skipped" in printed.out
    assert figure.stat().st_size > 0

    assert [(r["records"], r["keys"]) for r in data["size"]] == [(1000, 100), (10000, 1000)]
    assert data["size"][0]["p50_vs_smallest"] == 1.0
    for r in data["size"]:
        assert 0 < r["check_p50_ms"] <= r["check_p99_ms"] and r["bare_read_p50_ms"] > 0
        assert r["p50_vs_smallest"] == round(r["check_p50_ms"] / data["size"][0]["check_p50_ms"], 3)
    assert [r["deps"] for r in data["deps"]] == [1, 2, 4, 8, 16, 32, 64]
    assert all(0 < r["check_p50_ms"] <= r["check_p99_ms"] for r in data["deps"])
    assert isinstance(data["deps_slope_us_per_key"], float)
    assert [(r["backend"], r["processes"]) for r in data["processes"]] == [
        ("sqlite", n) for n in (1, 2, 4, 8)
    ]
    assert all(r["checks_per_s"] > 0 and r["check_p99_ms"] > 0 for r in data["processes"])
    for heading in ("store size", "|D(a)|", "slope", "Gate processes"):
        assert heading in printed.out
    assert printed.err.splitlines()[-1].startswith("bench scale: 13/13 ")


def test_bench_scale_seconds_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "scale", "--seconds", "0"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.startswith("planfence: error: argument --seconds")
