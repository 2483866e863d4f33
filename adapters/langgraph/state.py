"""The planfence keys a fenced LangGraph graph carries in its state.

- `planfence_plan`: the plan the next tool calls act under (set by the planner / model step).
- `planfence_reads`: key -> record ids the latest plan cites (its parents); every version read.
- `planfence_tool_reads`: key -> record ids tools read through a `PlanfenceStore`, cited by the
  next plans too (their results stay in the conversation); a replan starts afresh.
- `planfence_replans`: replans spent on the current action (0 or 1).
- `planfence_outcome`: {"status": "done" | "replan" | "blocked", "tool", "reason", "plan",
  "stale"} after the latest gated step, all of the step's calls folded into one.
- `planfence_verdicts`: verdicts of the latest tool step (several calls may run in parallel).
- `planfence_unavailable`: why the latest plan could not be stamped (the store could not be
  reached), or None; the tool calls made from it are refused as `store_unavailable`.

Everything a run reads lives here, in the run's own state, never in the objects a compiled graph
shares between runs.
"""

from __future__ import annotations

from typing import Annotated, Any

from typing_extensions import NotRequired, TypedDict

from planfence.plugins.gate.reads import ReadSet, merge_reads


def last_value(_: Any, new: Any) -> Any:
    """Last write wins, and parallel tool calls may all write in one step."""
    return new


def verdict_log(old: list[dict[str, Any]] | None, new: list[dict[str, Any]] | None) -> Any:
    """Append a step's verdicts; None clears the log."""
    if new is None:
        return []
    return [*(old or []), *new]


def read_log(old: ReadSet | None, new: ReadSet | None) -> ReadSet:
    """Add reads, keeping every version of every key; None clears."""
    if new is None:
        return {}
    return merge_reads(old, new)


class PlanfenceState(TypedDict):
    """Mix into a graph's state: `class State(MessagesState, PlanfenceState): ...`."""

    planfence_plan: NotRequired[str | None]
    planfence_reads: NotRequired[dict[str, list[str]]]
    planfence_tool_reads: NotRequired[Annotated[dict[str, list[str]], read_log]]
    planfence_replans: NotRequired[Annotated[int, last_value]]
    planfence_outcome: NotRequired[Annotated[dict[str, Any] | None, last_value]]
    planfence_verdicts: NotRequired[Annotated[list[dict[str, Any]], verdict_log]]
    planfence_unavailable: NotRequired[str | None]
