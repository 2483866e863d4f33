"""What the gate says, in the one form every adapter hands on: `RefusalPayload` for a call that
must not run, `AllowPayload` for the decision an allowed call carries, and `DecisionDetail` for
the audit record of either.

An adapter never serializes a `Verdict` itself: it takes `judged.payload` (an `Allowed` gives an
`AllowPayload`, a `Refused` a `RefusalPayload`, see `middleware`) and sends `payload.wire()`, a
JSON-able dict, in its framework's place for it (an MCP result's `_meta`, a LangGraph message
artifact, a framework's retry message). The models are frozen pydantic models, so what crosses a
process boundary is validated on the way back in (`parse_payload`).

A refusal:

    {"verdict": "replan" | "block", "reason": CODE, "tool": NAME, "plan": ID | null,
     "stale": [{"key": K, "used": [IDS], "current": ID | null}],
     "message": TEXT, "decision_id": N | null}

An allow's decision:

    {"verdict": "allow", "reason": "current" | "ungated", "tool": NAME, "plan": ID | null,
     "decision_id": N | null}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from .verdicts import ALLOW, Verdict


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def wire(self) -> dict[str, Any]:
        """The JSON-able form, as it travels."""
        return self.model_dump(mode="json")


class StaleEntry(_Frozen):
    """One key of D(a) the plan used other versions of than the current head."""

    key: str
    used: tuple[str, ...]
    current: str | None


class AllowPayload(_Frozen):
    """The decision an allowed call carries (MCP: `_meta["dev.planfence/decision"]`)."""

    verdict: Literal["allow"] = "allow"
    reason: str
    tool: str
    plan: str | None = None
    decision_id: int | None = None

    @classmethod
    def of(cls, verdict: Verdict) -> AllowPayload:
        if verdict.verdict != ALLOW:
            raise ValueError(f"an allow's payload for a {verdict.verdict} verdict")
        return cls(
            reason=str(verdict.reason),
            tool=verdict.tool,
            plan=verdict.plan,
            decision_id=verdict.decision_id,
        )


class RefusalPayload(_Frozen):
    """A call that must not run: `replan` (plan again, once) or `block`, the reason code, each
    changed key with the versions the plan used and the current head, and the gate's message."""

    verdict: Literal["replan", "block"]
    reason: str
    tool: str
    plan: str | None = None
    stale: tuple[StaleEntry, ...] = ()
    message: str = ""
    decision_id: int | None = None

    @classmethod
    def of(cls, verdict: Verdict) -> RefusalPayload:
        if verdict.verdict == ALLOW:
            raise ValueError("a refusal's payload for an allow")
        return cls(
            verdict=verdict.verdict,
            reason=str(verdict.reason),
            tool=verdict.tool,
            plan=verdict.plan,
            stale=tuple(
                StaleEntry(key=s.key, used=s.used, current=s.current) for s in verdict.stale
            ),
            message=verdict.message,
            decision_id=verdict.decision_id,
        )

    @property
    def stale_keys(self) -> tuple[str, ...]:
        return tuple(s.key for s in self.stale)

    @property
    def current(self) -> dict[str, str | None]:
        """Key -> the head the refusal showed, for every changed key."""
        return {s.key: s.current for s in self.stale}


Payload = Annotated[AllowPayload | RefusalPayload, Field(discriminator="verdict")]
_PAYLOAD: TypeAdapter[AllowPayload | RefusalPayload] = TypeAdapter(Payload)


def payload_of(verdict: Verdict) -> AllowPayload | RefusalPayload:
    """What the gate says about `verdict`, in its wire model."""
    if verdict.verdict == ALLOW:
        return AllowPayload.of(verdict)
    return RefusalPayload.of(verdict)


def parse_payload(
    data: Mapping[str, Any] | AllowPayload | RefusalPayload,
) -> AllowPayload | RefusalPayload:
    """A payload back from its wire form (raises pydantic's `ValidationError` when malformed)."""
    if isinstance(data, (AllowPayload, RefusalPayload)):
        return data
    return _PAYLOAD.validate_python(data)


class DecisionDetail(_Frozen):
    """The detail of a gate decision in the audit journal: everything the check knew."""

    message: str = ""
    executor: str
    args_digest: str | None = None
    values: dict[str, str] | None = None
    scope: tuple[str, ...] | None = None
    frontier: dict[str, tuple[str, ...]] | None = None
    heads: dict[str, str | None] | None = None
    epochs: dict[str, int] | None = None
    stale: tuple[StaleEntry, ...] | None = None
    latency_ms: float | None = None

    @classmethod
    def of(cls, verdict: Verdict, executor: str) -> DecisionDetail:
        return cls.model_validate(cls.record(verdict, executor))

    @staticmethod
    def record(verdict: Verdict, executor: str) -> dict[str, Any]:
        """`DecisionDetail.of(verdict, executor).wire()`, built directly: the gate writes one
        on every check, and validating a model of its own making would cost it more than the
        rest of an allow's work in memory (a test holds the two equal)."""
        return {
            "message": verdict.message,
            "executor": executor,
            "args_digest": verdict.args_digest,
            "values": dict(verdict.value_digests),
            "scope": list(verdict.scope),
            "frontier": {k: list(ids) for k, ids in verdict.frontier.items()},
            "heads": dict(verdict.heads),
            "epochs": dict(verdict.epochs),
            "stale": [
                {"key": s.key, "used": list(s.used), "current": s.current} for s in verdict.stale
            ],
            "latency_ms": verdict.latency_ms,
        }

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)


__all__ = [
    "AllowPayload",
    "DecisionDetail",
    "Payload",
    "RefusalPayload",
    "StaleEntry",
    "parse_payload",
    "payload_of",
]
