"""Framework-free pieces of the AutoGen adapter: checkers, policy round-trip, refusal text."""

from __future__ import annotations

import json
from typing import Any

from planfence.plugins.gate import Policy, Verdict, explain

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


# Shared with the other adapters; kept under their historical names here.
coerce_policy = Policy.coerce
refusal_text = explain


def policy_to_dict(policy: Policy) -> dict[str, Any]:
    return policy.to_dict()


def stale_json(v: Verdict) -> str:
    return json.dumps([s.to_dict() for s in v.stale], sort_keys=True)


__all__ = [
    "coerce_policy",
    "policy_to_dict",
    "refusal_text",
    "stale_json",
]
