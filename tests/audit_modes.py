"""The audit modes the fault-injection tests run in, and how they check a gate in each.

In `durable` mode an allow is on record before the gate answers, so a log that cannot take the
record turns that very allow into a block. In `deferred` mode (the default) the allow is
answered first and its record written by group commit just after: the write that fails shows as
an `AuditBacklogError` from `flush`, and every allow after it blocks with `audit_unavailable`.
"""

from __future__ import annotations

from planfence.plugins.gate import Gate, ToolCall, Verdict
from planfence.plugins.gate.audit_writer import AuditBacklogError

AUDIT_MODES = ("durable", "deferred")


async def check_until_recorded(gate: Gate, call: ToolCall) -> Verdict:
    """`gate.check`; when a deferred gate allowed, its queued record is written (`flush`) and,
    if that write fails, the verdict is the next check's: the one that must block. An allow
    whose record was written stands."""
    verdict = await gate.check(call)
    if gate.deferred is None or verdict.verdict != "allow":
        return verdict
    try:
        await gate.flush()
    except AuditBacklogError:
        return await gate.check(call)
    return verdict
