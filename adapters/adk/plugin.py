"""`PlanfencePlugin`: PlanFence as a Google ADK runner plugin, for every agent the runner runs.

Read side: before each model call the plugin appends the current public records to the request's
system instruction; when the model answers with function calls, it stamps a plan whose parents
are exactly the records shown for that request, superseding the invocation's previous plan. Act
side: `before_tool_callback` runs the gate. A refusal is returned as the tool's result (a dict,
so ADK skips the tool): the `RefusalPayload`'s wire form, whose `message` says in words which
records changed and their current values, so the model replans once; a block reads
`"verdict": "block"`. An allowed tool runs with the allow's fencing token as
`planfence.fence.current()`, and the lease its policy declares is released when the tool returns
or fails. Plans chain per invocation. A store that cannot be reached while the records are shown
or the plan is stamped is no error in the run: the instruction says the records cannot be read,
and a gated call is blocked as `store_unavailable`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any

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
from planfence.plugins.gate.fence import bound
from planfence.plugins.gate.outage import PlanUnavailable
from planfence.plugins.gate.wire import RefusalPayload
from planfence.shared_memory import AsyncStore, Record, Store, StoreBridge
from planfence.shared_memory.extras import extra_imports

from ..base import DEFAULT_HEADER, Adapter, for_model, read, reads_or_down, shown_text, stamp

with extra_imports("adk", "planfence.adapters.adk"):
    from google.adk.agents.callback_context import CallbackContext
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.plugins import BasePlugin
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.tool_context import ToolContext


class _Invocation:
    def __init__(self, stamper: PlanStamper) -> None:
        self.stamper = stamper
        self.shown: list[Record] | PlanUnavailable = []
        self.plan: str | PlanUnavailable | None = None


class PlanfencePlugin(Adapter, BasePlugin):
    """Shows the records, stamps plans from them, and gates every tool of every agent.

    Args:
        store: the store: a `Store`, an `AsyncStore`, a URL or a `StoreBridge`.
        policy: the declared scopes (a `Policy`, its dict form, or TOML text).
        gate: a `Gate` configured beyond these settings (see `Adapter.attach_gate`).
        middleware: gate middleware, outermost first.
        audit: how the gate records its decisions (see `Adapter.attach_gate`).
        keys: keys whose current version is shown to the model on every request.
        agent: plans are stored under `plans/<agent>` and audited as it.
    """

    def __init__(
        self,
        store: AsyncStore | Store | StoreBridge | str,
        policy: Policy | Mapping[str, Any] | str,
        *,
        keys: Iterable[str] = (),
        agent: str = "agent",
        gate: Gate | None = None,
        middleware: Iterable[Middleware] = (),
        audit: AuditMode = DEFAULT_AUDIT,
        header: str = DEFAULT_HEADER,
    ) -> None:
        super().__init__(name="planfence")
        self.attach_gate(store, policy, agent=agent, gate=gate, middleware=middleware, audit=audit)
        self.keys, self.header = list(keys), header
        self._runs: dict[str, _Invocation] = {}
        self._running: dict[str, tuple[Judgement, AbstractContextManager[Any]]] = {}

    def _run(self, invocation_id: str) -> _Invocation:
        found = self._runs.get(invocation_id)
        if found is None:
            found = self._runs[invocation_id] = _Invocation(self.new_stamper())
        return found

    async def after_run_callback(self, *, invocation_context: Any) -> None:
        self._runs.pop(invocation_context.invocation_id, None)

    # ---- read side

    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        run = self._run(callback_context.invocation_id)
        run.shown = await read(run.stamper, self.keys) if self.keys else []
        if run.shown:
            llm_request.append_instructions([shown_text(self.header, run.shown)])
        return None

    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        parts = llm_response.content.parts if llm_response.content else None
        if self.keys and any(p.function_call for p in parts or []):
            run = self._run(callback_context.invocation_id)
            run.plan = await stamp(run.stamper, reads_or_down(run.shown))
        return None

    # ---- act side

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        plan = self._run(tool_context.invocation_id).plan
        judged = await self.gate.judge(ToolCall(tool.name, dict(tool_args), plan))
        if isinstance(judged, Refused):  # what changed, with the current values, in words
            return RefusalPayload.of(for_model(judged.verdict)).wire()
        # The tool runs in this task, right after: its token is current until it returns.
        token = bound(judged.fence)
        token.__enter__()
        self._running[_call_id(tool_context)] = (judged, token)
        return None

    async def _done(self, tool_context: ToolContext) -> None:
        judged, token = self._running.pop(_call_id(tool_context), (None, None))
        if token is not None:
            token.__exit__(None, None, None)
        await self.gate.release(judged)

    async def after_tool_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        await self._done(tool_context)
        return None

    async def on_tool_error_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> dict[str, Any] | None:
        await self._done(tool_context)
        return None

    async def close(self) -> None:
        await self.aclose()


def _call_id(tool_context: ToolContext) -> str:
    return f"{tool_context.invocation_id}/{tool_context.function_call_id}"
