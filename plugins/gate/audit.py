"""The gate's audit record, `Decision`, and how it maps to and from the store's journal.

A decision is filed as a journal entry of kind `source` about the plan (its subject), with the
verdict, the reason code, the tool and the agent as labels (`VERDICT_LABEL`, ...), so the audit
can be searched by any of them (see `decision_log`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from planfence.shared_memory import JSON, Entry
from planfence.shared_memory.model import plain

AUDIT_SOURCE = "gate"
VERDICT_LABEL = "verdict"
"""The journal label a decision's verdict is filed under (Janus files its deploy/keep there too)."""


@dataclass(frozen=True)
class Decision:
    """One audited decision (gate verdicts; the MCP proxy's refusals; Janus's deploy/keep)."""

    source: str
    verdict: str
    reason: str = ""
    agent: str | None = None
    tool: str | None = None
    plan: str | None = None
    payload: Mapping[str, JSON] = field(default_factory=dict)
    at: str = ""
    id: int | None = None

    def __post_init__(self) -> None:
        for name in ("source", "verdict", "reason"):
            object.__setattr__(self, name, plain(getattr(self, name)))

    def to_entry(self, **more: str) -> Entry:
        """The journal entry; `more` are further labels (a batch's id, say)."""
        labels = {
            VERDICT_LABEL: self.verdict or None,
            "reason": self.reason or None,
            "tool": self.tool,
            "agent": self.agent,
            **more,
        }
        return Entry(
            kind=self.source,
            subject=self.plan,
            labels={k: v for k, v in labels.items() if v is not None},
            detail=self.payload,
            at=self.at,
            id=self.id,
        )

    @classmethod
    def from_entry(cls, entry: Entry) -> Decision:
        return cls(
            source=entry.kind,
            verdict=entry.labels.get(VERDICT_LABEL, ""),
            reason=entry.labels.get("reason", ""),
            agent=entry.labels.get("agent"),
            tool=entry.labels.get("tool"),
            plan=entry.subject,
            payload=entry.detail,
            at=entry.at,
            id=entry.id,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at,
            "source": self.source,
            "agent": self.agent,
            "tool": self.tool,
            "plan": self.plan,
            "verdict": self.verdict,
            "reason": self.reason,
            "payload": dict(self.payload),
        }
