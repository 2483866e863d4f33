"""The planfence keys a fenced LangGraph graph carries in its state.

- `planfence_plan`: the plan the next tool calls act under (set by the planner / model step).
- `planfence_reads`: key -> record id the planner saw (the plan's parents).
- `planfence_replans`: replans spent on the current action (0 or 1).
- `planfence_outcome`: {"status": "done" | "replan" | "blocked", "tool", "reason", "plan",
  "stale"} after the latest gated step.
- `planfence_verdicts`: verdicts of the latest tool step (several calls may run in parallel).
"""

from __future__ import annotations

from typing import Annotated, Any

from typing_extensions import NotRequired, TypedDict


def last_value(_: Any, new: Any) -> Any:
    """Last write wins, and parallel tool calls may all write in one step."""
    return new


def verdict_log(old: list[dict[str, Any]] | None, new: list[dict[str, Any]] | None) -> Any:
    """Append a step's verdicts; None clears the log."""
    if new is None:
        return []
    return [*(old or []), *new]


class PlanfenceState(TypedDict):
    """Mix into a graph's state: `class State(MessagesState, PlanfenceState): ...`."""

    planfence_plan: NotRequired[str | None]
    planfence_reads: NotRequired[dict[str, str]]
    planfence_replans: NotRequired[Annotated[int, last_value]]
    planfence_outcome: NotRequired[Annotated[dict[str, Any] | None, last_value]]
    planfence_verdicts: NotRequired[Annotated[list[dict[str, Any]], verdict_log]]
