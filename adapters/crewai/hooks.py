"""`Planfence`: PlanFence through CrewAI's interception hooks.

Read side: before each model call of a fenced agent (`PRE_MODEL_CALL`) the current public
records are put in its messages, replacing the ones shown before; the first tool call the model
makes from that view stamps a plan whose parents are exactly those records. Act side: the
pre-tool-call hook (`PRE_TOOL_CALL`) judges the call; an allow binds its fencing token
(`planfence.fence.current()` inside the tool) until the post-tool-call hook, which releases its
lease; a refusal aborts the call with `HookAborted`, and the post hook makes the refusal the
tool's answer: a replan asks the model to redo the call from the records shown next, a block
tells it the action will not run (with the refusal's wire payload).

CrewAI's hooks are process-wide: `install()` registers them (the fence acts only for agents whose
`role` is in `roles`), `close()` removes them. A hook error other than `HookAborted` would let
the tool run, so every failure here becomes a refusal.
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
    CheckerFactory,
    Judgement,
    Middleware,
    PlanStamper,
    Policy,
    Refused,
    ToolCall,
)
from planfence.plugins.gate.verdicts import fail_closed
from planfence.shared_memory import AsyncStore, Record, Store, StoreBridge
from planfence.shared_memory.extras import extra_imports

from .._fenced import Fenced
from .._records import DEFAULT_HEADER, records_text

with extra_imports("crewai", "planfence.adapters.crewai"):
    from crewai.hooks import HookAborted, InterceptionPoint, register_hook, unregister_hook


@dataclass
class _Seen:
    """One CrewAI agent's read side: the records its last model call showed, and its plans."""

    stamper: PlanStamper
    shown: list[Record] = field(default_factory=list)
    fresh: bool = False  # shown on a model call no plan was stamped from yet
    plan: str | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class _Open:
    """A judged tool call between the pre- and post-tool-call hooks."""

    judged: Judgement
    answer: str | None = None
    stack: ExitStack = field(default_factory=ExitStack)


class Planfence(Fenced):
    """Shows the records, stamps plans from them, and gates every tool call of the fenced agents.

    Args:
        store: a sync `Store`, an `AsyncStore`, a URL, or a `StoreBridge`.
        policy: the declared scopes (a `Policy`, its dict form, or TOML text).
        keys: keys whose current version is shown before every model call.
        prefixes: key prefixes shown the same way.
        agent: plans are stored under `plans/<agent>` and audited as it.
        roles: the CrewAI agent roles fenced (default: `agent`).
        checker: for experiments, a checker factory instead of the gate (see `GateMiddleware`).
        middleware: `planfence.plugins.gate.Middleware` around the gate, outermost first.
        audit: how allows are recorded (`deferred`, the default; `durable`; `off`), as for `Gate`.
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
        checker: CheckerFactory | str | None = None,
        middleware: Iterable[Middleware] = (),
        audit: AuditMode = DEFAULT_AUDIT,
        header: str = DEFAULT_HEADER,
    ) -> None:
        self._fence(store, policy, agent, checker=checker, middleware=middleware, audit=audit)
        self.keys, self.prefixes, self.header = list(keys), list(prefixes), header
        self.roles = frozenset([agent] if roles is None else roles)
        self._seen: dict[int, _Seen] = {}
        self._lock = threading.Lock()
        self._open: ContextVar[_Open | None] = ContextVar("planfence_crewai_call", default=None)
        self._hooks = (
            (InterceptionPoint.PRE_MODEL_CALL, self.show),
            (InterceptionPoint.PRE_TOOL_CALL, self.before_tool),
            (InterceptionPoint.POST_TOOL_CALL, self.after_tool),
        )
        self.installed = False

    def install(self) -> Planfence:
        """Register the hooks (after those already registered: the fence judges the input they
        leave)."""
        if not self.installed:
            for point, hook in self._hooks:
                register_hook(point, hook)
            self.installed = True
        return self

    def uninstall(self) -> None:
        for point, hook in self._hooks if self.installed else ():
            unregister_hook(point, hook)
        self.installed = False

    def close(self) -> None:
        """Remove the hooks and close the gate (a deferred audit writes its queue)."""
        self.uninstall()
        self.bridge.run(self.gate.aclose)

    async def aclose(self) -> None:
        """`close` from async code."""
        self.uninstall()
        await self.gate.aclose()

    def __enter__(self) -> Planfence:
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

    # ---- read side: the records before every model call, the plan from what was shown

    def show(self, ctx: Any) -> None:
        seen = self._of(ctx.agent)
        if seen is None or not (self.keys or self.prefixes):
            return
        records = self.bridge.run(seen.stamper.current, self.keys, self.prefixes)
        text = records_text(self.header, records)
        messages: list[Any] = ctx.messages
        mine = [m for m in messages if str(m.get("content", "")).startswith(self.header)]
        if mine:
            mine[0]["content"] = text
        else:
            at = next((i for i, m in enumerate(messages) if m.get("role") != "system"), 0)
            messages.insert(at, {"role": "system", "content": text})
        with seen.lock:
            seen.shown, seen.fresh = records, True

    def _plan(self, seen: _Seen, tool: str) -> str | None:
        with seen.lock:
            if seen.fresh:
                value = {"agent": self.agent, "tool": tool}
                plan = self.bridge.run(seen.stamper.stamp, [r.id for r in seen.shown], value=value)
                seen.plan, seen.fresh = plan.id, False
            return seen.plan

    # ---- act side: the gate between the pre- and post-tool-call hooks

    def before_tool(self, ctx: Any) -> None:
        seen = self._of(ctx.agent)
        if seen is None:
            return
        self._finish()  # a call whose post hook never ran
        call = ToolCall(ctx.tool_name, dict(ctx.tool_input))
        try:
            call = ToolCall(call.tool, call.args, self._plan(seen, call.tool))
            judged = self.gate.judge_sync(call)
        except Exception as exc:  # CrewAI runs the tool after any hook error but HookAborted
            judged = Refused(fail_closed(call.tool, call.plan, self.agent, exc))
        opened = _Open(judged)
        self._open.set(opened)
        if isinstance(judged, Refused):
            opened.answer = judged.message
            if not judged.replan:
                opened.answer += "\n" + json.dumps(judged.payload.wire())
            raise HookAborted(judged.message, source="planfence")
        opened.stack.enter_context(bound(judged.fence))

    def after_tool(self, ctx: Any) -> str | None:
        return self._finish() if self._of(ctx.agent) is not None else None

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
