"""`PlanfenceCapability`: PlanFence as a PydanticAI capability.

Read side: the capability's instructions show the model the current public records on every
request; when the model answers with tool calls, a plan is stamped whose parents are exactly the
records shown for that request, superseding the run's previous plan. Act side: every tool call
runs inside the gate (`wrap_tool_execute`, so the tool runs with the allow's fencing token as
`planfence.fence.current()` and holds the lease its policy declares). A stale plan comes back to
the model as a failed tool result (`ToolFailed`: a `ToolReturnPart` whose `outcome` is
`"failed"` and whose content is the refusal in words, naming the current values): it redoes the
call from the records shown on the next request, the replan. That replan is planfence's one,
not the tool's retry budget (a `ModelRetry` would spend that, and a model that had sent one
malformed call would get `UnexpectedModelBehavior` instead of its replan). A block skips the
tool (`SkipToolExecution`) and the model reads the refusal's wire payload as the tool's result.

A store that cannot be reached while the records are shown or the plan is stamped is no
exception in the run: the model is told the records cannot be read, and its gated calls are
blocked as `store_unavailable`.

Each run gets its own plan chain (`for_run`), so one agent can serve many runs at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from planfence.plugins.gate import (
    DEFAULT_AUDIT,
    AuditMode,
    Gate,
    Middleware,
    Policy,
    Refused,
    ToolCall,
)
from planfence.plugins.gate.outage import PlanUnavailable
from planfence.shared_memory import AsyncStore, Record, Store, StoreBridge
from planfence.shared_memory.extras import extra_imports

from ..base import DEFAULT_HEADER, Adapter, read, reads_or_down, shown_text, stamp

with extra_imports("pydantic-ai", "planfence.adapters.pydantic_ai"):
    from pydantic_ai import RunContext
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.capabilities.abstract import WrapToolExecuteHandler
    from pydantic_ai.exceptions import SkipToolExecution, ToolFailed
    from pydantic_ai.messages import ModelResponse, ToolCallPart
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.tools import ToolDefinition


class PlanfenceCapability(Adapter, AbstractCapability[Any]):
    """Shows the records, stamps plans from them, and gates every tool call.

    Args:
        store: the store: a `Store`, an `AsyncStore`, a URL or a `StoreBridge`.
        policy: the declared scopes (a `Policy`, its dict form, or TOML text).
        gate: a `Gate` configured beyond these settings (see `Adapter.attach_gate`).
        middleware: gate middleware, outermost first.
        audit: how the gate records its decisions (see `Adapter.attach_gate`).
        keys: keys whose current version is shown to the model on every request.
        prefixes: key prefixes shown the same way.
        agent: plans are stored under `plans/<agent>` and audited as it.
    """

    def __init__(
        self,
        store: AsyncStore | Store | StoreBridge | str,
        policy: Policy | Mapping[str, Any] | str,
        *,
        keys: Iterable[str] = (),
        prefixes: Iterable[str] = (),
        agent: str = "agent",
        gate: Gate | None = None,
        middleware: Iterable[Middleware] = (),
        audit: AuditMode = DEFAULT_AUDIT,
        header: str = DEFAULT_HEADER,
    ) -> None:
        self.attach_gate(store, policy, agent=agent, gate=gate, middleware=middleware, audit=audit)
        self.keys, self.prefixes, self.header = list(keys), list(prefixes), header
        self.stamper = self.new_stamper()
        self.shown: list[Record] | PlanUnavailable = []
        self.plan: str | PlanUnavailable | None = None

    async def for_run(self, ctx: RunContext[Any]) -> PlanfenceCapability:
        """A run of its own: its own plan chain and records shown, the same gate."""
        run = object.__new__(type(self))
        run.__dict__.update(self.__dict__)
        run.stamper = run.new_stamper()
        run.shown, run.plan = [], None
        return run

    # ---- read side: the records in the instructions, the plan from what was shown

    def get_instructions(self) -> Any:
        if not self.keys and not self.prefixes:
            return None

        async def records(ctx: RunContext[Any]) -> str:
            self.shown = await read(self.stamper, self.keys, self.prefixes)
            return shown_text(self.header, self.shown)

        return records

    async def after_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        calls = [p for p in response.parts if isinstance(p, ToolCallPart)]
        if calls and (self.keys or self.prefixes):
            value = {"agent": self.agent, "tool_calls": [c.tool_name for c in calls]}
            self.plan = await stamp(self.stamper, reads_or_down(self.shown), value=value)
        return response

    # ---- act side: the gate around the tool

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: dict[str, Any],
        handler: WrapToolExecuteHandler,
    ) -> Any:
        async with self.gate.guard(ToolCall(call.tool_name, args, self.plan)) as judged:
            if not isinstance(judged, Refused):
                return await handler(args)
        if judged.replan:
            raise ToolFailed(judged.message)
        raise SkipToolExecution(judged.payload.wire())

    def close(self) -> None:
        """`aclose` from sync code (after `run_sync`)."""
        self.bridge.run(self.gate.aclose)
