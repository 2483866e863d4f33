"""The message metadata keys the AutoGen adapter writes (message metadata is Dict[str, str]).

`ROUTE` holds the turn's `planfence.plugins.gate.StepOutcome` status; `STALE` the changed keys
as JSON, `[{"key": K, "current": ID}]`."""

from __future__ import annotations

# Message metadata written by the planning agent and the fenced executor (Dict[str, str]).
PLAN = "planfence.plan"
PARENTS = "planfence.parents"
SUPERSEDES = "planfence.supersedes"
ROUTE = "planfence.route"
REASON = "planfence.reason"
STALE = "planfence.stale"
TOOL = "planfence.tool"
UNAVAILABLE = "planfence.unavailable"  # why no plan could be stamped (the store was down)

ROUTE_REPLAN = "replan"
ROUTE_BLOCKED = "blocked"
ROUTE_DONE = "done"
