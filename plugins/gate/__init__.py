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

from .audit import Decision
from .audit_writer import DEFAULT_AUDIT
from .call import ToolCall
from .check_snapshot import snapshot
from .decision import ALLOW, BLOCK, REPLAN, Verdict
from .decision_log import find_decisions, find_decisions_sync
from .executor import Replanned
from .gate import AuditMode, Gate
from .heads import HeadSource
from .middleware import Allowed, CallNext, GateMiddleware, Judgement, Middleware, Refused
from .plans import PlanStamper, create_plan, refreshed_parents
from .policy import Policy, PolicyError, ScopeError, ToolPolicy
from .steps import StepOutcome, fold_step
from .store_heads import StoreHeads
from .sync_gate import SyncGate
from .templates import decode_segment
from .wire import AllowPayload, RefusalPayload, parse_payload

__all__ = [
    "ALLOW",
    "BLOCK",
    "DEFAULT_AUDIT",
    "REPLAN",
    "AllowPayload",
    "Allowed",
    "AuditMode",
    "CallNext",
    "Decision",
    "Gate",
    "GateMiddleware",
    "HeadSource",
    "Judgement",
    "Middleware",
    "PlanStamper",
    "Policy",
    "PolicyError",
    "RefusalPayload",
    "Refused",
    "Replanned",
    "ScopeError",
    "StepOutcome",
    "StoreHeads",
    "SyncGate",
    "ToolCall",
    "ToolPolicy",
    "Verdict",
    "create_plan",
    "decode_segment",
    "find_decisions",
    "find_decisions_sync",
    "fold_step",
    "parse_payload",
    "refreshed_parents",
    "snapshot",
]
