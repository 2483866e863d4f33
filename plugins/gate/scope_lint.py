"""Scope lint: find keys whose values flowed into a tool's arguments without being in its D(a).

For every allowed call in the audit, the lint digests the values of the records in the plan's
lineage (see `values`) and compares them with the digests of the call's arguments. A record of a
key outside the scope the gate checked, whose value equals an argument's, is a flow the gate
could not see: if that record had changed, the call would still have been allowed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planfence.shared_memory.lineage import Frontier
from planfence.shared_memory.records import KIND_PLAN

from .audit import Decision
from .policy import Policy
from .values import digest, leaves


@dataclass(frozen=True)
class AllowedCall:
    """What the lint needs from one audited allow."""

    decision: int | None
    tool: str
    plan: str
    scope: tuple[str, ...]
    values: Mapping[str, str]
    """Argument path -> value digest (the audit's `values`)."""

    @classmethod
    def from_audit(cls, decision: Decision) -> AllowedCall | None:
        """From an audited allow (`find_decisions`); None when it cannot be linted."""
        payload = decision.payload
        values = payload.get("values")
        if not decision.plan or not decision.tool or not isinstance(values, dict):
            return None
        return cls(
            decision.id,
            decision.tool,
            decision.plan,
            tuple(payload.get("scope") or ()),
            {str(k): str(v) for k, v in values.items()},
        )


@dataclass
class Flow:
    """A key (a template, when one fits) whose values reached `tool`'s arguments unchecked."""

    tool: str
    key: str
    calls: int = 0
    arguments: set[str] = field(default_factory=set)
    example: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool": self.tool,
            "key": self.key,
            "calls": self.calls,
            "arguments": sorted(self.arguments),
            "example": self.example,
        }


def template_of(key: str, by_digest: Mapping[str, list[str]]) -> str:
    """`key` with each segment that equals an argument written as `{argument}`."""
    out = []
    for segment in key.split("/"):
        paths = by_digest.get(digest(segment))
        out.append(f"{{{paths[0]}}}" if paths else segment)
    return "/".join(out)


def _declared(policy: Policy, tool: str) -> set[str]:
    tp = policy.get(tool)
    return {t.text for t in tp.depends_on} if tp is not None else set()


def lint_scopes(
    policy: Policy, calls: Iterable[AllowedCall], lineage: Callable[[str], Frontier]
) -> list[Flow]:
    """Every (tool, key) flow outside the checked scope, most frequent first. `lineage(plan)`
    returns the plan's ancestry (called once per plan)."""
    flows: dict[tuple[str, str], Flow] = {}
    walked: dict[str, Frontier] = {}
    for call in calls:
        by_digest: dict[str, list[str]] = {}
        for path, d in sorted(call.values.items()):
            by_digest.setdefault(d, []).append(path)
        if call.plan not in walked:
            walked[call.plan] = lineage(call.plan)
        scope = set(call.scope)
        declared = _declared(policy, call.tool)
        seen_here: set[tuple[str, str]] = set()
        for rec in walked[call.plan].records.values():
            if rec.kind == KIND_PLAN or rec.key in scope:
                continue
            hits = [
                (path, arg)
                for path, value in leaves(rec.value)
                for arg in by_digest.get(digest(value), ())
            ]
            if not hits:
                continue
            key = template_of(rec.key, by_digest)
            if key in declared:
                continue  # the policy covers it now
            flow = flows.setdefault((call.tool, key), Flow(call.tool, key))
            flow.arguments.update(arg for _, arg in hits)
            if (call.tool, key) not in seen_here:
                seen_here.add((call.tool, key))
                flow.calls += 1
            if not flow.example:
                value_path, arg = hits[0]
                flow.example = {
                    "decision": call.decision,
                    "plan": call.plan,
                    "record": rec.id,
                    "record_key": rec.key,
                    "value_path": value_path,
                    "argument": arg,
                }
    return sorted(flows.values(), key=lambda f: (-f.calls, f.tool, f.key))
