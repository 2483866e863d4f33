"""What the gate answers: the verdict kinds, the stable reason codes, and `Verdict` itself."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, Literal

from planfence.shared_memory import Record

ALLOW: Literal["allow"] = "allow"
REPLAN: Literal["replan"] = "replan"
BLOCK: Literal["block"] = "block"
VerdictKind = Literal["allow", "replan", "block"]


class Reason(str, Enum):
    """The stable reason codes of a verdict. Members are strings: they compare, format and encode
    as their value ("current", "stale_dependencies", ...), in the audit log and on the wire."""

    CURRENT = "current"
    UNGATED = "ungated"
    STALE = "stale_dependencies"
    MISSING_PLAN = "missing_plan"
    UNKNOWN_PLAN = "unknown_plan"
    UNKNOWN_RECORD = "unknown_record"
    INCOMPLETE_LINEAGE = "incomplete_lineage"
    UNDECLARED_TOOL = "undeclared_tool"
    SCOPE_UNRESOLVED = "scope_unresolved"
    OWNER_UNREACHABLE = "owner_unreachable"
    OWNER_UNAUTHENTICATED = "owner_unauthenticated"
    OWNER_EPOCH_STALE = "owner_epoch_stale"
    HEAD_ROLLBACK = "head_rollback"
    STALE_AFTER_REPLAN = "stale_after_replan"
    LINEAGE_TOO_LARGE = "lineage_too_large"
    STORE_UNAVAILABLE = "store_unavailable"
    AUDIT_UNAVAILABLE = "audit_unavailable"
    INTERNAL_ERROR = "internal_error"
    LEASE_UNAVAILABLE = "lease_unavailable"
    AGENT_NOT_ALLOWED = "agent_not_allowed"

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str.__str__(self), spec)


# Module-level names for the codes, as the rest of the gate spells them.
CURRENT = Reason.CURRENT
UNGATED = Reason.UNGATED
STALE = Reason.STALE
MISSING_PLAN = Reason.MISSING_PLAN
UNKNOWN_PLAN = Reason.UNKNOWN_PLAN
UNKNOWN_RECORD = Reason.UNKNOWN_RECORD
INCOMPLETE_LINEAGE = Reason.INCOMPLETE_LINEAGE
UNDECLARED_TOOL = Reason.UNDECLARED_TOOL
SCOPE_UNRESOLVED = Reason.SCOPE_UNRESOLVED
OWNER_UNREACHABLE = Reason.OWNER_UNREACHABLE
OWNER_UNAUTHENTICATED = Reason.OWNER_UNAUTHENTICATED
OWNER_EPOCH_STALE = Reason.OWNER_EPOCH_STALE
HEAD_ROLLBACK = Reason.HEAD_ROLLBACK
STALE_AFTER_REPLAN = Reason.STALE_AFTER_REPLAN
LINEAGE_TOO_LARGE = Reason.LINEAGE_TOO_LARGE
STORE_UNAVAILABLE = Reason.STORE_UNAVAILABLE
AUDIT_UNAVAILABLE = Reason.AUDIT_UNAVAILABLE
INTERNAL_ERROR = Reason.INTERNAL_ERROR
LEASE_UNAVAILABLE = Reason.LEASE_UNAVAILABLE
AGENT_NOT_ALLOWED = Reason.AGENT_NOT_ALLOWED

BLOCK_REASONS = frozenset(
    {
        MISSING_PLAN,
        UNKNOWN_PLAN,
        UNKNOWN_RECORD,
        INCOMPLETE_LINEAGE,
        UNDECLARED_TOOL,
        SCOPE_UNRESOLVED,
        OWNER_UNREACHABLE,
        OWNER_UNAUTHENTICATED,
        OWNER_EPOCH_STALE,
        HEAD_ROLLBACK,
        STALE_AFTER_REPLAN,
        LINEAGE_TOO_LARGE,
        STORE_UNAVAILABLE,
        AUDIT_UNAVAILABLE,
        INTERNAL_ERROR,
        LEASE_UNAVAILABLE,
        AGENT_NOT_ALLOWED,
    }
)


@dataclass(frozen=True)
class StaleKey:
    key: str
    used: tuple[str, ...]
    current: str | None


@dataclass(frozen=True)
class Verdict:
    """The gate's answer for one call. `replan` carries what changed and the fresh records.
    What of it crosses a process boundary is in `wire` (`payload_of`, `DecisionDetail`)."""

    verdict: VerdictKind
    reason: str
    tool: str
    plan: str | None
    agent: str | None = None
    message: str = ""
    scope: tuple[str, ...] = ()
    frontier: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    heads: Mapping[str, str | None] = field(default_factory=dict)
    epochs: Mapping[str, int] = field(default_factory=dict)
    """The owner epoch of each key of D(a) its head was answered for."""
    stale: tuple[StaleKey, ...] = ()
    current_records: Mapping[str, Record] = field(default_factory=dict)
    args_digest: str = ""
    value_digests: Mapping[str, str] = field(default_factory=dict, repr=False)
    """Digests of the arguments' values, by argument path (for the audit and the scope lint)."""
    latency_ms: float = 0.0
    decision_id: int | None = None

    @property
    def allowed(self) -> bool:
        return self.verdict == ALLOW

    def evolve(self, **changes: Any) -> Verdict:
        """A copy with some fields changed, as `dataclasses.replace` makes, at a fraction of its
        cost (the gate stamps every verdict it returns). Unknown field names raise TypeError."""
        if not _VERDICT_FIELDS.issuperset(changes):
            unknown = sorted(changes.keys() - _VERDICT_FIELDS)
            raise TypeError(f"Verdict has no field {unknown[0]!r}")
        new = object.__new__(Verdict)
        new.__dict__.update(self.__dict__, **changes)  # frozen: fields are set only here
        return new


_VERDICT_FIELDS = frozenset(f.name for f in fields(Verdict))


def fail_closed(tool: str, plan_id: Any, agent: str | None, exc: BaseException) -> Verdict:
    """The verdict for a check that could not run at all: block, saying why."""
    return Verdict(
        BLOCK,
        INTERNAL_ERROR,
        tool,
        plan_id if isinstance(plan_id, str) else None,
        agent,
        message=f"gate error: {type(exc).__name__}: {exc}",
    )
