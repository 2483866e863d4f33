"""The LangGraph demo runs in scripted mode, sync and async."""

from __future__ import annotations

import subprocess
import sys

import pytest

from planfence.demos import langgraph_graph


@pytest.fixture(autouse=True)
def scripted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PLANFENCE_LLM_MODEL", raising=False)


@pytest.mark.parametrize("use_async", [True, False])
def test_demo_replans_once_and_books_the_new_destination(use_async: bool) -> None:
    result = langgraph_graph.run(use_async=use_async)
    assert result.outcome["status"] == "done"
    assert (result.replans, result.booked) == (1, ["Porto"])
    assert any("trip/42/requirements changed" in line for line in result.lines)


def test_demo_stale_again_is_blocked_and_baseline_books_stale() -> None:
    blocked = langgraph_graph.run(stale_again=True, use_async=False)
    assert (blocked.outcome["status"], blocked.booked) == ("blocked", [])
    assert langgraph_graph.run(baseline=True).booked == ["Lisbon"]


def test_demo_runs_as_a_module() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "planfence.demos.langgraph_graph", "--scripted"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "planfence refused book_flight" in out
    assert "booked: ['Porto']" in out
