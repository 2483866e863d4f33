"""`PlanfenceHooks`: PlanFence through CrewAI's interception hooks.

Read side: before each model call of a fenced agent (`PRE_MODEL_CALL`) the current public
records are put in its messages, replacing the ones shown before; the first tool call the model
makes from that view stamps a plan whose parents are exactly those records. Act side: the
pre-tool-call hook (`PRE_TOOL_CALL`) judges the call; an allow binds its fencing token
(`planfence.fence.current()` inside the tool) until the post-tool-call hook, which releases its
lease; a refusal aborts the call with `HookAborted`, and the post hook makes the refusal the
tool's answer: a replan asks the model to redo the call from the records shown next, a block
tells it the action will not run (with the refusal's wire payload).

CrewAI's hooks are process-wide: `install()` registers them, `close()` removes them. The fence
shows records to and stamps plans for the agents whose `role` is in `roles`; a tool call of an
agent whose role no installed fence knows is refused (`unknown_agent`, on the record, naming
the roles the fences know): a role that does not match never turns the gate off. Each crew
kickoff (`EXECUTION_START`) starts new plan chains for the crew's agents, so a run after a
blocked one gets its own replan. A hook error other than `HookAborted` would let the tool run,
so every failure here becomes a refusal; a store that cannot be reached while the records are
shown or the plan is stamped is one too (`store_unavailable`), and the model is told the
records cannot be read.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Mapping
from contextlib import ExitStack
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from planfence.fence import bound
from planfence.plugins.gate import (
    DEFAULT_AUDIT,
    AuditMode,
    Gate,
    Judgement,
    Middleware,
    PlanStamper,
    Policy,
    Refused,
    ToolCall,
)
from planfence.plugins.gate.outage import PlanUnavailable, failure
from planfence.shared_memory import AsyncStore, Record, Store, StoreBridge
from planfence.shared_memory.extras import extra_imports

from ..base import DEFAULT_HEADER, UNREADABLE, Adapter, read, reads_or_down, shown_text, stamp

with extra_imports("crewai", "planfence.adapters.crewai"):
    from crewai.hooks import HookAborted, InterceptionPoint, register_hook, unregister_hook


UNKNOWN_AGENT = "unknown_agent"
"""The reason a tool call of an agent whose role no installed fence knows is refused with."""
_INSTALLED: list[PlanfenceHooks] = []  # the fences whose hooks are registered, in order
_INSTALLED_LOCK = threading.Lock()


@dataclass
class _Seen:
    """One CrewAI agent's read side: the records its last model call showed, and its plans."""

    stamper: PlanStamper
    shown: list[Record] | PlanUnavailable = field(default_factory=list)
    fresh: bool = False  # shown on a model call no plan was stamped from yet
    plan: str | PlanUnavailable | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class _Open:
    """A judged tool call between the pre- and post-tool-call hooks."""

    judged: Judgement
    answer: str | None = None
    stack: ExitStack = field(default_factory=ExitStack)


class PlanfenceHooks(Adapter):
    """Shows the records, stamps plans from them, and gates every tool call of the fenced agents.

    Args:
        store: the store: a `Store`, an `AsyncStore`, a URL or a `StoreBridge`.
        policy: the declared scopes (a `Policy`, its dict form, or TOML text).
        gate: a `Gate` configured beyond these settings (see `Adapter.attach_gate`).
        middleware: gate middleware, outermost first.
        audit: how the gate records its decisions (see `Adapter.attach_gate`).
        keys: keys whose current version is shown before every model call.
        prefixes: key prefixes shown the same way.
        agent: plans are stored under `plans/<agent>` and audited as it.
        roles: the CrewAI agent roles fenced (default: `agent`), exactly as the agents' `role`;
            while the fence is installed, the tool calls of an agent whose role no installed
            fence lists are refused.
    """

    def __init__(
        self,
        store: AsyncStore | Store | StoreBridge | str,
        policy: Policy | Mapping[str, Any] | str,
        *,
        keys: Iterable[str] = (),
        prefixes: Iterable[str] = (),
        agent: str = "agent",
        roles: Iterable[str] | None = None,
        gate: Gate | None = None,
        middleware: Iterable[Middleware] = (),
        audit: AuditMode = DEFAULT_AUDIT,
        header: str = DEFAULT_HEADER,
    ) -> None:
        self.attach_gate(store, policy, agent=agent, gate=gate, middleware=middleware, audit=audit)
        self.keys, self.prefixes, self.header = list(keys), list(prefixes), header
        self.roles = frozenset([agent] if roles is None else roles)
        self._seen: dict[int, _Seen] = {}
        self._lock = threading.Lock()
        self._open: ContextVar[_Open | None] = ContextVar("planfence_crewai_call", default=None)
        self._hooks = (
            (InterceptionPoint.EXECUTION_START, self.new_run),
            (InterceptionPoint.PRE_MODEL_CALL, self.show),
            (InterceptionPoint.PRE_TOOL_CALL, self.before_tool),
            (InterceptionPoint.POST_TOOL_CALL, self.after_tool),
        )
        self.installed = False

    def install(self) -> PlanfenceHooks:
        """Register the hooks (after those already registered: the fence judges the input they
        leave)."""
        if not self.installed:
            for point, hook in self._hooks:
                register_hook(point, hook)
            with _INSTALLED_LOCK:
                _INSTALLED.append(self)
            self.installed = True
        return self

    def uninstall(self) -> None:
        for point, hook in self._hooks if self.installed else ():
            unregister_hook(point, hook)
        with _INSTALLED_LOCK:
            if self in _INSTALLED:
                _INSTALLED.remove(self)
        self.installed = False

    def close(self) -> None:
        """Remove the hooks and close the gate (a deferred audit writes its queue)."""
        self.uninstall()
        self.bridge.run(self.gate.aclose)

    async def aclose(self) -> None:
        """`close` from async code."""
        self.uninstall()
        await self.gate.aclose()

    def __enter__(self) -> PlanfenceHooks:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _of(self, crew_agent: Any) -> _Seen | None:
        if not self.installed or getattr(crew_agent, "role", None) not in self.roles:
            return None
        with self._lock:
            seen = self._seen.get(id(crew_agent))
            if seen is None:
                seen = self._seen[id(crew_agent)] = _Seen(self.new_stamper())
            return seen

    def new_run(self, ctx: Any) -> None:
        """A crew's kickoff: its agents start new plan chains (each run its own replan)."""
        with self._lock:
            for crew_agent in getattr(ctx.crew, "agents", None) or ():
                self._seen.pop(id(crew_agent), None)

    # ---- read side: the records before every model call, the plan from what was shown

    def show(self, ctx: Any) -> None:
        seen = self._of(ctx.agent)
        if seen is None or not (self.keys or self.prefixes):
            return
        records = self.bridge.run(read, seen.stamper, self.keys, self.prefixes)
        text = shown_text(self.header, records)
        messages: list[Any] = ctx.messages
        mine = [m for m in messages if _shown_here(str(m.get("content", "")), self.header)]
        if mine:
            mine[0]["content"] = text
        else:
            at = next((i for i, m in enumerate(messages) if m.get("role") != "system"), 0)
            messages.insert(at, {"role": "system", "content": text})
        with seen.lock:
            seen.shown, seen.fresh = records, True

    def _plan(self, seen: _Seen, tool: str) -> str | PlanUnavailable | None:
        with seen.lock:
            if seen.fresh:
                value = {"agent": self.agent, "tool": tool}
                reads = reads_or_down(seen.shown)
                seen.plan = self.bridge.run(stamp, seen.stamper, reads, value=value)
                seen.fresh = False
            return seen.plan

    # ---- act side: the gate between the pre- and post-tool-call hooks

    def before_tool(self, ctx: Any) -> None:
        seen = self._of(ctx.agent)
        if seen is None and not self._refuses_unknown(ctx.agent):
            return  # another installed fence gates this agent
        self._finish()  # a call whose post hook never ran
        call = ToolCall(ctx.tool_name, dict(ctx.tool_input))
        try:
            if seen is None:
                judged: Judgement = self._unknown(call, ctx.agent)
            else:
                call = ToolCall(call.tool, call.args, self._plan(seen, call.tool))
                judged = self.gate.judge_sync(call)
        except Exception as exc:  # CrewAI runs the tool after any hook error but HookAborted
            judged = Refused(failure(call.tool, call.plan, self.agent, exc))
        opened = _Open(judged)
        self._open.set(opened)
        if isinstance(judged, Refused):
            opened.answer = judged.message
            if not judged.replan:
                opened.answer += "\n" + json.dumps(judged.payload.wire())
            raise HookAborted(judged.message, source="planfence")
        opened.stack.enter_context(bound(judged.fence))

    def after_tool(self, ctx: Any) -> str | None:
        return self._finish()  # None unless this fence judged the call

    def _refuses_unknown(self, crew_agent: Any) -> bool:
        """Whether this fence refuses `crew_agent`'s calls: no installed fence knows its role,
        and this is the first one installed (one refusal, on one record)."""
        role = getattr(crew_agent, "role", None)
        with _INSTALLED_LOCK:
            fences = list(_INSTALLED)
        if any(role in fence.roles for fence in fences):
            return False
        return bool(fences) and fences[0] is self

    def _unknown(self, call: ToolCall, crew_agent: Any) -> Refused:
        """The refusal of a call by an agent whose role no installed fence knows."""
        role = getattr(crew_agent, "role", None)
        with _INSTALLED_LOCK:
            known = sorted({r for fence in _INSTALLED for r in fence.roles})
        message = (
            f"the CrewAI agent with role {role!r} is not fenced (the installed fences know the "
            f"roles {', '.join(map(repr, known))}): its tool calls are refused. Add its role, "
            f"exactly as the agent's `role`: PlanfenceHooks(..., roles=[..., {role!r}])"
        )
        return self.bridge.run(self.gate.refuse, call, UNKNOWN_AGENT, message, by="crewai")

    def _finish(self) -> str | None:
        """Close the open call (its token and lease); its refusal is the tool's answer."""
        opened = self._open.get()
        if opened is None:
            return None
        self._open.set(None)
        opened.stack.close()
        if not isinstance(opened.judged, Refused) and opened.judged.lease is not None:
            self.bridge.run(self.gate.release, opened.judged)
        return opened.answer


def _shown_here(content: str, header: str) -> bool:
    """Whether a message is the records (or the records-unreadable note) this fence showed."""
    return content.startswith(header) or content.startswith(UNREADABLE.split("{", 1)[0])
