"""planfence.plugins.gate: the PlanFence gate on the action path.

gate = Gate(store, Policy.load("policy.toml"))
verdict = await gate.check(ToolCall("ship_order", {"order_id": "7"}, plan_id))
outcome = await GateMiddleware(store, policy, gate=gate).run(call, ship, replan_once)

Adapters go through one seam: `PlanStamper` stamps plans from what was read, and
`GateMiddleware` judges each `ToolCall` as `Allowed` or `Refused`, whose `payload` (an
`AllowPayload` or a `RefusalPayload`, see `wire`) is what the adapter hands on.

The gate's errors, under the store's (`planfence.shared_memory.errors`):

PlanfenceError
├── ConfigError
│   └── PolicyError              a policy file or declaration that cannot load
├── ScopeError                   a call's arguments do not fill its declared keys
├── FenceError                   a fencing token that does not hold at commit time
│   ├── MalformedFenceError      not a fencing token (or not for these arguments or this tool)
│   ├── FenceSignatureError      unsigned where a signature is required, or a bad signature
│   └── StaleFenceError          a key's head moved since the gate checked it
└── StoreError
    └── AuditBacklogError        a deferred audit that cannot keep another record
"""

from .audit import AUDIT_SOURCE, Decision
from .audit_writer import AUDIT_MODES, DEFAULT_AUDIT, audit_mode
from .call import Checker, ToolCall
from .checkers import CheckerFactory, gate_checker
from .decision import (
    ALLOW,
    BLOCK,
    BLOCK_REASONS,
    REPLAN,
    HeadAnswer,
    Reason,
    StaleKey,
    Verdict,
    fail_closed,
    gate_flow,
)
from .decision_log import find_decisions, find_decisions_sync
from .executor import CallFn, Outcome, ReplanFn, Replanned
from .explain import explain
from .fence import (
    FenceError,
    FenceSignatureError,
    FenceToken,
    MalformedFenceError,
    StaleFenceError,
    fenced_write,
)
from .gate import AuditMode, Gate
from .heads import HeadSource
from .middleware import (
    Allowed,
    CallNext,
    GateMiddleware,
    Judgement,
    Middleware,
    Refused,
    judge_with,
    run_middleware,
)
from .plans import CHAIN, PlanStamper, create_plan, create_plan_sync, plan_key, refreshed_parents
from .policy import KeyTemplate, Policy, PolicyError, ScopeError, ToolPolicy
from .reads import ReadSet, add_reads, merge_reads, parents_of, read_heads, reads_of, refreshed
from .snapshot import Flag, PlanSnapshot, snapshot, snapshot_and_log
from .steps import BLOCKED, DONE, REPLANNING, StepOutcome, StepStatus, action_done, fold_step
from .store_heads import StoreHeads
from .sync_gate import SyncGate
from .templates import decode_segment, encode_segment
from .wire import (
    AllowPayload,
    DecisionDetail,
    Payload,
    RefusalPayload,
    StaleEntry,
    parse_payload,
    payload_of,
)

__all__ = [
    "ALLOW",
    "AUDIT_MODES",
    "AUDIT_SOURCE",
    "BLOCK",
    "BLOCKED",
    "BLOCK_REASONS",
    "CHAIN",
    "DEFAULT_AUDIT",
    "DONE",
    "REPLAN",
    "REPLANNING",
    "AllowPayload",
    "Allowed",
    "AuditMode",
    "CallFn",
    "CallNext",
    "Checker",
    "CheckerFactory",
    "Decision",
    "DecisionDetail",
    "FenceError",
    "FenceSignatureError",
    "FenceToken",
    "Flag",
    "Gate",
    "GateMiddleware",
    "HeadAnswer",
    "HeadSource",
    "Judgement",
    "KeyTemplate",
    "MalformedFenceError",
    "Middleware",
    "Outcome",
    "Payload",
    "PlanSnapshot",
    "PlanStamper",
    "Policy",
    "PolicyError",
    "ReadSet",
    "Reason",
    "RefusalPayload",
    "Refused",
    "ReplanFn",
    "Replanned",
    "ScopeError",
    "StaleEntry",
    "StaleFenceError",
    "StaleKey",
    "StepOutcome",
    "StepStatus",
    "StoreHeads",
    "SyncGate",
    "ToolCall",
    "ToolPolicy",
    "Verdict",
    "action_done",
    "add_reads",
    "audit_mode",
    "create_plan",
    "create_plan_sync",
    "decode_segment",
    "encode_segment",
    "explain",
    "fail_closed",
    "fenced_write",
    "find_decisions",
    "find_decisions_sync",
    "fold_step",
    "gate_checker",
    "gate_flow",
    "judge_with",
    "merge_reads",
    "parents_of",
    "parse_payload",
    "payload_of",
    "plan_key",
    "read_heads",
    "reads_of",
    "refreshed",
    "refreshed_parents",
    "run_middleware",
    "snapshot",
    "snapshot_and_log",
]
