"""Benchmarks over the emulated link run on a fresh machine: traces come from the options, from
$PLANFENCE_TRACES, or from a seeded synthetic cellular trace with the statistics of the real
AT&T traces; the output says which."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from planfence.adapters.cli.common import UsageError
from planfence.adapters.cli.main import main
from planfence.demos.bench.netem.sources import TRACES_ENV, load_traces
from planfence.demos.bench.netem.synthetic import (
    ATT_LTE_DRIVING_MEASURED,
    SYNTHETIC_SEED,
    synthetic_times,
    trace_stats,
)
from planfence.demos.bench.netem.trace import Trace


def trace_args(up: str | None = None, down: str | None = None) -> argparse.Namespace:
    return argparse.Namespace(trace_up=up, trace_down=down)


def test_synthetic_trace_is_the_same_for_the_same_seed() -> None:
    first = synthetic_times("up")
    assert first == synthetic_times("up", seed=SYNTHETIC_SEED)
    assert first != synthetic_times("up", seed=SYNTHETIC_SEED + 1)
    assert first != synthetic_times("down")
    assert first == sorted(first) and first[0] >= 0
    Trace(tuple(first), "synthetic")  # a valid mahimahi trace


@pytest.mark.parametrize("direction", ["up", "down"])
def test_synthetic_trace_has_the_statistics_of_the_real_one(direction: str) -> None:
    real = ATT_LTE_DRIVING_MEASURED[direction]
    synthetic = trace_stats(synthetic_times(direction))
    assert synthetic["mean_mbps"] == pytest.approx(real["mean_mbps"], rel=0.1)
    assert synthetic["p50_mbps"] == pytest.approx(real["p50_mbps"], rel=0.1)
    assert synthetic["p90_mbps"] == pytest.approx(real["p90_mbps"], rel=0.1)
    assert synthetic["cv_1s"] == pytest.approx(real["cv_1s"], rel=0.15)  # burstiness
    assert synthetic["ac1_1s"] == pytest.approx(real["ac1_1s"], abs=0.05)
    assert synthetic["idle_gaps_per_min"] == pytest.approx(real["idle_gaps_per_min"], rel=0.3)
    assert synthetic["idle_100ms_share"] == pytest.approx(real["idle_100ms_share"], rel=0.3)
    assert synthetic["max_gap_s"] >= 1.0  # it has outages, as a moving phone does


def test_trace_stats_of_a_constant_link() -> None:
    stats = trace_stats(list(range(1, 10_001)))  # one packet every millisecond for 10 s
    assert stats["mean_mbps"] == pytest.approx(12.0)
    assert stats["p10_mbps"] == pytest.approx(12.0, rel=1e-3)
    assert stats["p90_mbps"] == pytest.approx(12.0, rel=1e-3)
    assert stats["idle_gaps_per_min"] == 0 and stats["idle_100ms_share"] == 0


def test_without_options_or_folder_the_synthetic_trace_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(TRACES_ENV, raising=False)
    up, down, kind = load_traces(trace_args())
    assert kind == "synthetic"
    assert up.times == tuple(synthetic_times("up"))
    assert "synthetic cellular trace" in up.source and "synthetic" in down.source


def test_the_traces_folder_is_read_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ATT-LTE-driving.up").write_text("1\n2\n")
    (tmp_path / "ATT-LTE-driving.down").write_text("1\n1\n3\n")
    monkeypatch.setenv(TRACES_ENV, str(tmp_path))
    up, down, kind = load_traces(trace_args())
    assert kind == "file" and up.times == (1, 2) and down.times == (1, 1, 3)
    assert up.source == str(tmp_path / "ATT-LTE-driving.up")


def test_options_win_over_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TRACES_ENV, str(tmp_path / "nowhere"))
    mine = tmp_path / "mine.trace"
    mine.write_text("5\n")
    up, _, kind = load_traces(trace_args(str(mine), str(mine)))
    assert kind == "file" and up.times == (5,)


def test_one_trace_option_alone_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="go together"):
        load_traces(trace_args(up=str(tmp_path / "x.up")))


@pytest.mark.slow
def test_replay_on_a_fresh_machine_says_it_used_the_synthetic_trace(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.delenv(TRACES_ENV, raising=False)
    out = tmp_path / "replay.json"
    argv = ["bench", "replay", "--paths", "att", "--rates", "0", "--actions", "1"]
    assert main([*argv, "--out", str(out)]) == 0  # one run: the table printed, the JSON written
    assert "att trace: synthetic cellular trace (seed" in capsys.readouterr().out
    settings = json.loads(out.read_text())["settings"]
    assert settings["trace_kind"] == "synthetic"
    assert settings["trace_up"].startswith("synthetic cellular trace (up")
