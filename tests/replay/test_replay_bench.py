"""Smoke run of `planfence bench replay --quick` on loopback and a fast synthetic link.

Checks the JSON's shape and the safety results, never a time: every executor that enforces
exact lineage issues zero invalid actions, freshness-only acts on every stale plan, and replans
and blocks are exactly what the replayed stream implies.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from planfence.adapters.cli.main import main
from planfence.demos.bench.replay.executors import EXECUTORS, SAFE
from planfence.demos.bench.replay.report import plot
from planfence.demos.bench.replay.schedule import RATES

ROW_FIELDS = {
    "path",
    "rate",
    "executor",
    "actions",
    "updates",
    "stall_p50_ms",
    "stall_mean_ms",
    "action_path_mean_ms",
    "update_path_mean_ms",
    "push_p50_ms",
    "messages_per_action",
    "bytes_per_action",
    "replans",
    "blocks",
    "block_reasons",
    "executed",
    "invalid",
    "expected_stale",
    "expected_overtaken",
    "trace_ms",
}
CROSSOVER_FIELDS = {
    "vs_eager",
    "vs_eager_interpolated",
    "planfence_lower_than_eager_at",
    "vs_allkeys",
    "vs_allkeys_interpolated",
    "planfence_lower_than_allkeys_at",
    "eager_lower_at_lowest_rate",
    "planfence_lower_than_eager_from_4",
}
PATHS = ("loopback", "att")
ACTIONS = 8


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], str]:
    tmp = tmp_path_factory.mktemp("replay")
    up, down = tmp / "fast.up", tmp / "fast.down"
    up.write_text("1\n")
    down.write_text("1\n1\n")
    out = tmp / "replay.json"
    argv = ["bench", "replay", "--actions", str(ACTIONS), "--trace-up", str(up)]
    argv += ["--trace-down", str(down), "--delay-ms", "2", "--out", str(out)]
    assert main(argv) == 0
    return json.loads(out.read_text()), str(up)


@pytest.mark.slow
def test_quick_run_writes_the_documented_json(quick_run: tuple[dict[str, Any], str]) -> None:
    data, up = quick_run
    assert set(data) == {"settings", "rows", "crossover", "safety", "stores", "interrupted"}
    assert [s["backend"] for s in data["stores"]] == ["sqlite"]
    s = data["settings"]
    assert s["actions"] == ACTIONS and s["rates"] == list(RATES)
    assert s["paths"] == list(PATHS) and s["executors"] == list(EXECUTORS)
    assert s["trace_up"] == up and s["delay_ms"] == 2 and s["trace_kind"] == "file"
    assert s["link_up_packets"] > 0 and s["link_down_packets"] > 0

    grid = {(r["path"], r["rate"], r["executor"]) for r in data["rows"]}
    assert grid == {(p, r, e) for p in PATHS for r in RATES for e in EXECUTORS}
    assert len(data["rows"]) == len(grid)
    for row in data["rows"]:
        assert set(row) == ROW_FIELDS
        assert row["actions"] == ACTIONS
        assert row["updates"] == math.floor(row["rate"] * ACTIONS + 0.5)
        assert row["stall_p50_ms"] >= 0
        assert row["stall_mean_ms"] > 0
        assert row["messages_per_action"] > 0 and row["bytes_per_action"] > 0
        assert row["executed"] + row["blocks"] == ACTIONS
        assert (row["trace_ms"] is None) == (row["path"] == "loopback")
        if row["executor"] == "eager":
            assert row["update_path_mean_ms"] > 0 and row["push_p50_ms"] > 0
            # every update reaches every one of the 3 replicas, as one message each
            assert row["messages_per_action"] == pytest.approx(3 * row["updates"] / ACTIONS)
        else:
            assert row["update_path_mean_ms"] == 0 and row["push_p50_ms"] is None

    for path in PATHS:
        assert set(data["crossover"][path]) == CROSSOVER_FIELDS
        by = {(r["rate"], r["executor"]): r for r in data["rows"] if r["path"] == path}
        for rate in RATES:  # the all-key check asks every owner, planfence those of D(a) only
            assert (
                by[(rate, "allkeys")]["bytes_per_action"]
                > by[(rate, "planfence")]["bytes_per_action"]
            )


@pytest.mark.slow
def test_exact_lineage_never_acts_on_a_stale_plan(quick_run: tuple[dict[str, Any], str]) -> None:
    data, _ = quick_run
    for row in data["rows"]:
        if row["executor"] in SAFE:
            assert row["invalid"] == 0, row
            assert row["replans"] == row["expected_stale"], row
            assert row["blocks"] == row["expected_overtaken"], row
            overtaken = {"stale_after_replan": row["blocks"]} if row["blocks"] else {}
            assert row["block_reasons"] == overtaken, row  # none failed closed on this run
    safety = data["safety"]
    assert safety["exact_lineage_invalid"] == 0
    assert all(safety["invalid"][ex] == 0 for ex in SAFE)
    assert safety["scheduled_actions"] == {
        ex: len(PATHS) * len(RATES) * ACTIONS for ex in EXECUTORS
    }


@pytest.mark.slow
def test_freshness_only_acts_on_every_stale_plan(quick_run: tuple[dict[str, Any], str]) -> None:
    data, _ = quick_run
    fresh = [r for r in data["rows"] if r["executor"] == "freshness"]
    for row in fresh:
        assert row["invalid"] == row["expected_stale"], row
        assert row["replans"] == 0 and row["blocks"] == 0
    # with updates landing after planning, some plans go stale, and freshness acts on them
    for path in PATHS:
        assert sum(r["invalid"] for r in fresh if r["path"] == path) > 0
        assert all(r["invalid"] > 0 for r in fresh if r["path"] == path and r["rate"] >= 4)
    assert data["safety"]["invalid"]["freshness"] == data["safety"]["stale_plans_scheduled"] > 0


@pytest.mark.slow
def test_plot_draws_the_quick_run(quick_run: tuple[dict[str, Any], str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "replay.png"
    plot(quick_run[0], str(out))
    assert out.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--paths", "mars"], "--paths takes"),
        (["--rates", "fast"], "--rates takes numbers"),
        (["--rates", "-1"], "non-negative"),
        (
            [
                "--paths",
                "att",
                "--trace-up",
                "/nonexistent.up",
                "--trace-down",
                "/nonexistent.down",
            ],
            "cannot read trace",
        ),
    ],
)
def test_bad_settings_are_refused_before_anything_starts(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "replay", "--quick", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("planfence: error:") and message in err
