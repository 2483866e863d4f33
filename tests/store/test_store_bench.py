"""`planfence bench store` runs with tiny counts and writes the documented JSON shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from planfence.adapters.cli.main import main

KEYS = {"backend", "op", "depth", "p50_ms", "p99_ms", "ops_per_s"}


def check_rows(path: Path, backends: set[str]) -> list[dict[str, object]]:
    rows = json.loads(path.read_text())["rows"]
    assert {r["backend"] for r in rows} == backends
    for r in rows:
        assert set(r) == KEYS
        assert isinstance(r["p50_ms"], float)
        assert isinstance(r["p99_ms"], float)
        assert isinstance(r["ops_per_s"], float)
    for backend in backends:
        mine = [(r["op"], r["depth"]) for r in rows if r["backend"] == backend]
        assert mine == [
            ("head_read", None),
            ("cas_advance", None),
            ("record_put", None),
            ("frontier", 1),
            ("frontier", 10),
            ("frontier", 100),
        ]
    return rows


def test_bench_store_sqlite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out" / "bench.json"
    url = f"sqlite:///{tmp_path / 'data' / 'x.db'}"
    code = main(
        ["bench", "store", "--store", url, "--repeat", "2", "--warmup", "0", "--out", str(out)]
    )
    assert code == 0
    check_rows(out, {"sqlite"})
    text = capsys.readouterr().out
    assert "frontier" in text
    assert "p99_ms" in text
    assert list((tmp_path / "data").iterdir()) == []  # the throwaway store is gone
    (store,) = json.loads(out.read_text())["stores"]
    assert store["backend"] == "sqlite"
    assert store["url"].startswith(f"sqlite:///{tmp_path / 'data'}/planfence-bench-")
    assert f"store: {store['url']}" in text


def test_bench_store_postgres(pg_url: str, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    code = main(
        [
            "bench",
            "store",
            "--store",
            pg_url,
            "--repeat",
            "2",
            "--warmup",
            "1",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    check_rows(out, {"postgres"})


def test_bench_store_default_runs_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PLANFENCE_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:1/test")
    out = tmp_path / "bench.json"
    assert main(["bench", "store", "--repeat", "1", "--warmup", "0", "--out", str(out)]) == 0
    check_rows(out, {"sqlite"})
    assert "note: skipped postgres" in capsys.readouterr().out


def test_bench_store_unreachable_explicit_store_fails(capsys: pytest.CaptureFixture[str]) -> None:
    url = "postgresql://postgres@127.0.0.1:1/test"
    assert main(["bench", "store", "--store", url, "--repeat", "1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("planfence: error: cannot connect to PostgreSQL at 127.0.0.1:1")
    assert "Traceback" not in err
