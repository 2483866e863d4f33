"""The one call object: what an adapter builds for a tool call, and what every checker judges.

A `ToolCall` goes down unchanged from the framework's tool call to the rule: the middleware
stack passes it on, the gate judges it (`Checker.check(call)`), its repeat cache keys on it, and
every verdict about it carries its digests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from planfence.shared_memory import AsyncStore
from planfence.shared_memory.records import canonical_json

from .policy import Policy
from .values import value_digests
from .verdicts import Verdict, VerdictKind


@dataclass(frozen=True)
class ToolCall:
    """One tool call as the gate sees it.

    Args:
        tool: the tool's name.
        args: the arguments it would run with.
        plan: the plan record id the call acts under, as the caller sent it (None: no plan).
        agent: who calls, for the audit log (None: the gate's or middleware's own agent).
        replan_spent: the caller already spent its one replan on this action (the one-replan
            loop's second check).
    """

    tool: str
    args: Mapping[str, Any]
    plan: Any = None
    agent: str | None = None
    replan_spent: bool = False

    def by(self, agent: str | None) -> ToolCall:
        """The call as `agent` makes it, unless it names its own agent."""
        if self.agent is not None or agent is None:
            return self
        return replace(self, agent=agent)

    @property
    def plan_id(self) -> str | None:
        """The plan reference when it is a string (what a verdict records), else None."""
        return self.plan if isinstance(self.plan, str) else None

    # Computed once per call, on first use, and kept in the instance's dict (what
    # functools.cached_property does, without the lock it takes on Python 3.11).
    @property
    def args_digest(self) -> str:
        """SHA-256 of the arguments' canonical JSON."""
        found = self.__dict__.get("_args_digest")
        if found is None:
            found = self.__dict__["_args_digest"] = args_digest(self.args)
        return found

    @property
    def value_digests(self) -> dict[str, str]:
        """Digests of the arguments' values by path (see `values`)."""
        found = self.__dict__.get("_value_digests")
        if found is None:
            found = self.__dict__["_value_digests"] = value_digests(self.args)
        return found

    def verdict(
        self,
        verdict: VerdictKind,
        reason: str,
        message: str = "",
        scope: tuple[str, ...] = (),
        **kw: Any,
    ) -> Verdict:
        """A verdict about this call, with its digests."""
        return Verdict(
            verdict,
            reason,
            self.tool,
            self.plan_id,
            self.agent,
            message=message,
            scope=scope,
            args_digest=self.args_digest,
            value_digests=self.value_digests,
            **kw,
        )


def args_digest(args: Mapping[str, Any]) -> str:
    if not args:  # most tools a gate sees on every call take no arguments that name keys
        return EMPTY_ARGS_DIGEST
    try:
        text = canonical_json(dict(args))
    except Exception:
        text = repr(sorted(args.items(), key=lambda kv: str(kv[0])))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


EMPTY_ARGS_DIGEST = hashlib.sha256(b"{}").hexdigest()


class Checker(Protocol):
    """Anything that judges calls over a store and a policy: the gate, or (in the demos'
    experiments) a baseline. A checker may also have `flush()` and `aclose()`, which the seam
    calls when it has them."""

    name: str
    store: AsyncStore
    policy: Policy

    async def check(self, call: ToolCall) -> Verdict: ...
