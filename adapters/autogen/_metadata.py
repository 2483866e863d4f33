"""The message metadata keys the AutoGen adapter writes (message metadata is Dict[str, str])."""

from __future__ import annotations

import json

from planfence.plugins.gate import Verdict

# Message metadata written by the planning agent and the fenced executor (Dict[str, str]).
PLAN = "planfence.plan"
PARENTS = "planfence.parents"
SUPERSEDES = "planfence.supersedes"
ROUTE = "planfence.route"
REASON = "planfence.reason"
STALE = "planfence.stale"
TOOL = "planfence.tool"

ROUTE_REPLAN = "replan"
ROUTE_BLOCKED = "blocked"
ROUTE_DONE = "done"


def stale_json(v: Verdict) -> str:
    return json.dumps([s.to_dict() for s in v.stale], sort_keys=True)


__all__ = [
    "stale_json",
]
