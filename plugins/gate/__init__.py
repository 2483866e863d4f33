"""planfence.plugins.gate: the PlanFence gate on the action path.

gate = Gate(store, Policy.load("policy.toml"))
verdict = await gate.check("ship_order", {"order_id": "7"}, plan_id)
outcome = await gate.run("ship_order", args, plan_id, call=ship, replan=replan_once)
"""

from .audit import AUDIT_SOURCE, Decision
from .checkers import CheckerFactory, checker_factory, checker_path, gate_checker
from .decision import (
    ALLOW,
    BLOCK,
    BLOCK_REASONS,
    REPLAN,
    CheckRequest,
    HeadAnswer,
    Reason,
    StaleKey,
    Verdict,
    fail_closed,
    gate_flow,
)
from .explain import explain
from .gate import Checker, Gate, GuardedExecutor, Outcome, Replanned, SyncGate
from .heads import HeadSource
from .plans import create_plan, create_plan_sync, plan_key, refreshed_parents
from .policy import KeyTemplate, Policy, PolicyError, ScopeError, ToolPolicy
from .snapshot import Flag, PlanSnapshot, snapshot, snapshot_and_log
from .store_heads import StoreHeads

__all__ = [
    "ALLOW",
    "AUDIT_SOURCE",
    "BLOCK",
    "BLOCK_REASONS",
    "REPLAN",
    "CheckRequest",
    "Checker",
    "CheckerFactory",
    "Decision",
    "Flag",
    "Gate",
    "GuardedExecutor",
    "HeadAnswer",
    "HeadSource",
    "KeyTemplate",
    "Outcome",
    "PlanSnapshot",
    "Policy",
    "PolicyError",
    "Reason",
    "Replanned",
    "ScopeError",
    "StaleKey",
    "StoreHeads",
    "SyncGate",
    "ToolPolicy",
    "Verdict",
    "checker_factory",
    "checker_path",
    "create_plan",
    "create_plan_sync",
    "explain",
    "fail_closed",
    "gate_checker",
    "gate_flow",
    "plan_key",
    "refreshed_parents",
    "snapshot",
    "snapshot_and_log",
]
