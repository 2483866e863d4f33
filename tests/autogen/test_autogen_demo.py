"""The AutoGen demo runs in scripted mode and tells the story the AutoGen page promises."""

from __future__ import annotations

import subprocess
import sys

import pytest

from planfence.demos import autogen_team


@pytest.fixture(autouse=True)
def scripted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLANFENCE_LLM_MODEL", raising=False)


async def test_demo_replans_once_and_books_the_new_destination() -> None:
    result = await autogen_team.run()
    assert (result.status, result.replans, result.booked) == ("done", 1, ["Porto"])
    assert any("trip/42/requirements changed" in line for line in result.lines)


async def test_demo_stale_again_is_blocked_and_baseline_books_stale() -> None:
    blocked = await autogen_team.run(stale_again=True)
    assert (blocked.status, blocked.booked) == ("blocked", [])
    assert "stale_after_replan" in blocked.stop_reason
    baseline = await autogen_team.run(baseline=True)
    assert baseline.booked == ["Lisbon"]


def test_demo_runs_as_a_module() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "planfence.demos.autogen_team", "--scripted"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "planfence refused book_flight" in out
    assert "booked: ['Porto']" in out
