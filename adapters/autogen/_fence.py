"""Framework-free pieces of the AutoGen adapter: checkers, policy round-trip, refusal text."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Literal

from planfence.plugins.gate import (
    BLOCK,
    REPLAN,
    FreshnessOnly,
    Gate,
    GuardedExecutor,
    Policy,
    Verdict,
)
from planfence.shared_memory import AsyncStore, ConfigError, canonical_json

CheckerKind = Literal["planfence", "freshness"]
CHECKERS: tuple[CheckerKind, ...] = ("planfence", "freshness")

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


def make_checker(
    kind: str, store: AsyncStore, policy: Policy, agent: str | None
) -> GuardedExecutor:
    """The gate, or the freshness-only baseline (the control that acts on stale plans)."""
    if kind == "planfence":
        return Gate(store, policy, agent=agent)
    if kind == "freshness":
        return FreshnessOnly(store, policy)
    raise ConfigError(f"unknown checker {kind!r}: use one of {', '.join(CHECKERS)}")


def policy_to_dict(policy: Policy) -> dict[str, Any]:
    """The `Policy.from_dict` form of `policy`, so it can travel inside a component config."""
    tools: dict[str, Any] = {}
    for name, tp in policy.tools.items():
        tools[name] = (
            {"ungated": True} if tp.ungated else {"depends_on": [t.text for t in tp.depends_on]}
        )
    return {"tools": tools}


def coerce_policy(policy: Policy | Mapping[str, Any] | str) -> Policy:
    """A `Policy`, its dict form, or TOML text."""
    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, str):
        return Policy.from_toml(policy)
    return Policy.from_dict(policy)


def _short(record_id: str | None) -> str:
    return record_id[:12] if record_id else "none"


def refusal_text(v: Verdict) -> str:
    """What the model reads when the gate refuses: which records changed and what they are now."""
    if v.verdict == REPLAN:
        head = (
            f"planfence refused {v.tool}: the plan was derived from outdated public records. "
            "Ask for a new plan from the current records (one replan is allowed)."
        )
    elif v.verdict == BLOCK:
        head = f"planfence blocked {v.tool} ({v.reason}): {v.message}. This action will not run."
    else:
        return f"planfence allowed {v.tool}"
    lines = [head]
    for s in v.stale:
        current = v.current_records.get(s.key)
        now = f" = {canonical_json(current.value)}" if current is not None else ""
        used = ", ".join(_short(u) for u in s.used) or "none"
        lines.append(f"- {s.key} changed: the plan used {used}, current {_short(s.current)}{now}")
    return "\n".join(lines)


def stale_json(v: Verdict) -> str:
    return json.dumps([s.to_dict() for s in v.stale], sort_keys=True)
