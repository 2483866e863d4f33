"""Plans for clients that cannot set `_meta`: the proxy as the session's shared memory.

In a desktop client the model writes tool arguments and nothing else. `planfence proxy --agent
NAME` therefore serves three tools of its own beside the upstream's (`planfence_read`,
`planfence_keys`, `planfence_write`) and remembers, per client session, the exact record
versions that session read. A gated call that comes without `_meta["dev.planfence/plan"]` gets a
plan stamped for it: its parents are exactly those versions, and it supersedes the session's
previous plan, so the gate's one-replan budget holds as it does for the LangGraph middleware.
A refusal tells the model which keys changed and to read them again.

A session is one connection: a stdio pipe, or a streamable-HTTP session (`Mcp-Session-Id`).
A 2026-era HTTP request stands alone; with no session to remember reads in, a call without a
plan is refused with a message saying that the plan must come in `_meta`.

A block ends the action: the session's next plan starts a chain of its own, with its own replan
(the proxy cannot tell where a client's conversation ends and the next begins, and a blocked one
is over). When a read finds the store unreachable, or the plan cannot be stamped, the session's
gated calls are refused as `store_unavailable` until a read succeeds again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from planfence.plugins.gate import BLOCK, REPLAN, PlanStamper, Policy, Verdict
from planfence.plugins.gate.decision import Reason
from planfence.plugins.gate.explain import explain
from planfence.plugins.gate.outage import PlanUnavailable, store_down
from planfence.plugins.gate.reads import ReadSet, add_reads, refreshed
from planfence.shared_memory import AsyncStore, NotOwnerError, PlanfenceError, UnknownKeyError

from ..base import stamp
from .meta import META_PLAN
from .results import for_model

READ, KEYS, WRITE = "planfence_read", "planfence_keys", "planfence_write"
_STATE = "dev.planfence/session"

ASK_READ_AGAIN = (
    "Call planfence_read again for each changed key below, check your plan against the new "
    "values, then make the call again (one replan is allowed)."
)
READ_FIRST = (
    "Read the records this action depends on with planfence_read first (planfence_keys lists "
    "them), then make the call again: it is checked against exactly the versions you read."
)


def read_these(keys: list[str]) -> str:
    """The way forward after `missing_plan` or `incomplete_lineage`: the keys to read."""
    if not keys:
        return READ_FIRST
    shown = ", ".join(repr(k) for k in keys[:10]) + (" ..." if len(keys) > 10 else "")
    return (
        f"Read {shown} with planfence_read first, then make the call again: it is checked "
        "against exactly the versions you read."
    )


def _sentence(text: str) -> str:
    """`text` ending as a sentence, so that a hint can follow it."""
    text = text.strip()
    return text if not text or text[-1] in ".!?" else text + "."


NO_SESSION = (
    "This connection has no session (a 2026-era HTTP request stands alone), so the proxy cannot "
    f"remember what you read: the plan must come in the call's _meta[{META_PLAN!r}]."
)


def tool_definitions(agent: str) -> list[dict[str, Any]]:
    """The proxy's own tools, in `tools/list` wire form, described for a model."""
    key = {"type": "string", "description": "the record's key, e.g. trip/t1/requirements"}
    return [
        {
            "name": READ,
            "title": "Read a shared record",
            "description": "Read the current value of a shared record, with its record id. "
            "Read every record your next action depends on before you act: the action is "
            "checked against exactly the versions you read. If an action is refused because "
            "records changed, read those records again and reconsider.",
            "inputSchema": {"type": "object", "properties": {"key": key}, "required": ["key"]},
        },
        {
            "name": KEYS,
            "title": "List shared records",
            "description": "List the keys of shared records under a prefix (empty: all), with "
            "each key's owner and current record id. Use it to find what to read.",
            "inputSchema": {
                "type": "object",
                "properties": {"prefix": {"type": "string", "default": ""}},
            },
        },
        {
            "name": WRITE,
            "title": "Write a shared record",
            "description": f"Store a new value for a shared record that you ({agent}) own. "
            "Records owned by others cannot be written: read them instead.",
            "inputSchema": {
                "type": "object",
                "properties": {"key": key, "value": {"description": "any JSON value"}},
                "required": ["key", "value"],
            },
        },
    ]


class _Session:
    def __init__(self, store: AsyncStore, agent: str) -> None:
        self.reads: ReadSet = {}
        self.stamper = PlanStamper(store, agent)
        self.down: PlanUnavailable | None = None  # the latest read found the store down


def _result(body: Any, *, error: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "content": [{"type": "text", "text": json.dumps(body, sort_keys=True)}],
        "isError": error,
        "resultType": "complete",
    }
    if isinstance(body, dict):
        out["structuredContent"] = body
    return out


def _error(message: str) -> dict[str, Any]:
    return _result({"error": message}, error=True)


class SessionPlans:
    """The proxy's own tools and automatic plans, one read set per client session.

    Args:
        store: the proxy's store (the gate's).
        policy: which tools are gated (only those get a plan stamped).
        agent: who this proxy acts for: plans go under `plans/<agent>`, writes as `agent`.
    """

    def __init__(self, store: AsyncStore, policy: Policy, agent: str) -> None:
        self.store = store
        self.policy = policy
        self.agent = agent

    def tools(self) -> list[dict[str, Any]]:
        return tool_definitions(self.agent)

    def serves(self, tool: str) -> bool:
        return tool in (READ, KEYS, WRITE)

    # ---- sessions

    def session(self, peer: Any) -> _Session | None:
        """The session's state; None where the transport has no session (a 2026-era HTTP
        request stands alone). A stdio pipe is one session, whatever the protocol era."""
        if not getattr(peer, "session", False):
            return None
        state: dict[str, Any] = peer.state
        found = state.get(_STATE)
        if not isinstance(found, _Session):
            found = state[_STATE] = _Session(self.store, self.agent)
        return found

    # ---- the proxy's own tools

    async def call(self, peer: Any, tool: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """Answer a call to one of the proxy's own tools."""
        session = self.session(peer)
        try:
            if tool == READ:
                return await self._read(session, args)
            if tool == KEYS:
                return await self._keys(args)
            return await self._write(args)
        except PlanfenceError as exc:
            if tool == READ and session is not None and store_down(exc):
                session.down = PlanUnavailable.of(exc)
            return _error(f"{type(exc).__name__}: {exc}")

    async def _read(self, session: _Session | None, args: Mapping[str, Any]) -> dict[str, Any]:
        key = args.get("key")
        if not isinstance(key, str) or not key:
            return _error("planfence_read needs a key (a string)")
        head = (await self.store.heads([key])).get(key)
        if head is None:
            return _error(f"no record has key {key!r}; planfence_keys lists the keys")
        record = await self.store.get(head)
        if session is not None:
            add_reads(session.reads, [(key, record.id)])
            session.down = None
        return _result({"key": key, "value": record.value, "record": record.id})

    async def _keys(self, args: Mapping[str, Any]) -> dict[str, Any]:
        prefix = args.get("prefix") or ""
        if not isinstance(prefix, str):
            return _error("planfence_keys takes a prefix (a string)")
        found = await self.store.keys(prefix)
        rows = [{"key": s.key, "owner": s.owner, "record": s.head} for s in found]
        return _result({"prefix": prefix, "keys": rows})

    async def _write(self, args: Mapping[str, Any]) -> dict[str, Any]:
        key = args.get("key")
        if not isinstance(key, str) or not key or "value" not in args:
            return _error("planfence_write needs a key (a string) and a value")
        try:
            record = await self.store.put(key, args["value"], author=self.agent)
        except NotOwnerError:
            owner = await self.store.owner(key)
            return _error(
                f"refused: {key!r} is owned by {owner}, not by you ({self.agent}); only its "
                "owner can write it. Read it with planfence_read instead."
            )
        except UnknownKeyError:
            return _error(
                f"refused: you ({self.agent}) do not own {key!r}: the key has no owner yet, and "
                f"only its owner can write it (a person assigns it with `planfence memory own "
                f"{key} --owner {self.agent}`). planfence_keys lists the keys that exist."
            )
        return _result({"key": key, "record": record.id, "written": True})

    # ---- automatic plans

    def gated(self, tool: str) -> bool:
        spec = self.policy.get(tool)
        return spec is not None and not spec.ungated

    async def plan_for(self, peer: Any, tool: str) -> str | PlanUnavailable | None:
        """A plan for a gated call that came without one: parents = the session's reads; it
        supersedes the session's previous plan. None when there is no session, the session read
        nothing, or the tool is not gated; `PlanUnavailable` when the store was down."""
        session = self.session(peer)
        if session is None or not self.gated(tool):
            return None
        if session.down is not None:
            return session.down
        if not session.reads:
            return None
        return await stamp(session.stamper, session.reads, value={"tool": tool})

    def explain(self, peer: Any, verdict: Verdict, stamped: bool) -> Verdict:
        """The refusal as the model should read it: which keys to read again, or (no session)
        that the plan must come in `_meta`."""
        session = self.session(peer)
        if verdict.reason == Reason.MISSING_PLAN:
            hint = NO_SESSION if session is None else read_these(list(verdict.scope))
            return replace(verdict, message=f"{_sentence(verdict.message)} {hint}".strip())
        if verdict.reason == Reason.INCOMPLETE_LINEAGE and session is not None:
            # The keys the plan never reached: what the session has yet to read.
            unread = [k for k in verdict.scope if not verdict.frontier.get(k)]
            hint = read_these(unread or list(verdict.scope))
            return replace(verdict, message=f"{_sentence(verdict.message)} {hint}")
        if not stamped or session is None:
            return for_model(verdict)
        if verdict.verdict == BLOCK:  # the action is over: the next one gets its own replan
            session.stamper.reset()
            return verdict
        if verdict.verdict != REPLAN:
            return verdict
        # The refusal shows what changed; those versions replace the ones read before.
        current = {s.key: s.current for s in verdict.stale}
        session.reads = refreshed(session.reads, current)
        return replace(verdict, message=explain(verdict, ask=ASK_READ_AGAIN))


__all__ = ["KEYS", "READ", "WRITE", "SessionPlans", "tool_definitions"]
