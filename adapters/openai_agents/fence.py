"""`PlanfenceGuardrail` for the OpenAI Agents SDK: records in the agent's instructions, the gate as
a `tool_input_guardrail` on every fenced `function_tool`.

Read side: `fence.instructions(text)` is the agent's dynamic instructions; on every turn they show
the model the current public records. The plan for a turn's tool calls is stamped when the first
of them reaches the gate; its parents are exactly the records shown on that turn, and it supersedes
the run's previous plan. Act side: `fence.tool(fn)` is `function_tool(fn)` with the gate as its
input guardrail. A stale plan is `reject_content` with the refusal (the model reads it instead of
the result and calls again: the replan); a block is `raise_exception`, which ends the run with
`ToolInputGuardrailTripwireTriggered` whose `output.output_info` is the `RefusalPayload`'s wire
form. An allowed tool runs with the allow's fencing token as `planfence.fence.current()` and holds
the lease its policy declares until it returns. One `PlanfenceGuardrail` serves one run at a time (a
new run, seen in the instructions' run context, starts a new plan chain).

A store that cannot be reached while the records are shown or the plan is stamped does not end
the run with an error: the instructions say the records cannot be read, and a gated call is
blocked as `store_unavailable` (`raise_exception`, as any block).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from typing import Any

from planfence.plugins.gate import (
    DEFAULT_AUDIT,
    Allowed,
    AuditMode,
    Gate,
    Judgement,
    Middleware,
    Policy,
    Refused,
    ToolCall,
)
from planfence.plugins.gate.fence import bound
from planfence.plugins.gate.outage import PlanUnavailable
from planfence.shared_memory import AsyncStore, Record, Store, StoreBridge
from planfence.shared_memory.extras import extra_imports

from ..base import DEFAULT_HEADER, Adapter, read, reads_or_down, shown_text, stamp

with extra_imports("openai-agents", "planfence.adapters.openai_agents"):
    from agents import (
        FunctionTool,
        RunContextWrapper,
        ToolGuardrailFunctionOutput,
        ToolInputGuardrailData,
        function_tool,
        tool_input_guardrail,
    )

# The allow of the call about to run: set by the guardrail, read by the tool in the task the SDK
# starts for it right after (a task copies the context it was created in).
_JUDGED: ContextVar[Judgement | None] = ContextVar("planfence_openai_agents", default=None)


class PlanfenceGuardrail(Adapter):
    """Shows the records, stamps plans from them, and gates every fenced tool.

    Args:
        store: the store: a `Store`, an `AsyncStore`, a URL or a `StoreBridge`.
        policy: the declared scopes (a `Policy`, its dict form, or TOML text).
        gate: a `Gate` configured beyond these settings (see `Adapter.attach_gate`).
        middleware: gate middleware, outermost first.
        audit: how the gate records its decisions (see `Adapter.attach_gate`).
        keys: keys whose current version the instructions show on every turn.
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
        self.attach_gate(store, policy, agent=agent, gate=gate, middleware=middleware, audit=audit)
        self.keys, self.header = list(keys), header
        self.stamper = self.new_stamper()
        self.guardrail = tool_input_guardrail(name="planfence")(self._judge)
        self._run: object = None
        # Shown on this turn, not yet planned from.
        self._shown: list[Record] | PlanUnavailable | None = None
        self.plan: str | PlanUnavailable | None = None

    def instructions(
        self, text: str = ""
    ) -> Callable[[RunContextWrapper[Any], Any], Awaitable[str]]:
        """The agent's instructions: `text`, then the current records."""

        async def show(run: RunContextWrapper[Any], agent: Any) -> str:
            if run is not self._run:  # a new run: a new plan chain
                self._run, self.plan = run, None
                self.stamper.reset()
            self._shown = await read(self.stamper, self.keys) if self.keys else None
            shown = shown_text(self.header, self._shown) if self._shown else ""
            return "\n\n".join(t for t in (text, shown) if t)

        return show

    def tool(self, fn: Callable[..., Any], **kwargs: Any) -> FunctionTool:
        """`function_tool(fn, **kwargs)` behind the gate."""

        @functools.wraps(fn)
        async def fenced(*args: Any, **kw: Any) -> Any:
            judged = _JUDGED.get()
            if not isinstance(judged, Allowed):  # never run a call the gate did not allow
                return "planfence: this call was not judged by the gate and did not run"
            _JUDGED.set(None)
            try:
                with bound(judged.fence):
                    out = fn(*args, **kw)
                    return await out if isinstance(out, Awaitable) else out
            finally:
                await self.gate.release(judged)

        guardrails = [*kwargs.pop("tool_input_guardrails", []), self.guardrail]
        return function_tool(fenced, tool_input_guardrails=guardrails, **kwargs)

    async def _judge(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        if self._shown is not None:  # the first call of this turn: the turn's plan
            shown, self._shown = self._shown, None
            self.plan = await stamp(self.stamper, reads_or_down(shown))
        call = data.context
        try:
            args = json.loads(call.tool_arguments or "{}")
        except ValueError:
            args = {"_unparsed": call.tool_arguments}
        judged = await self.gate.judge(ToolCall(call.tool_name, args, self.plan))
        _JUDGED.set(judged)
        if not isinstance(judged, Refused):
            return ToolGuardrailFunctionOutput.allow(judged.payload.wire())
        if judged.replan:
            return ToolGuardrailFunctionOutput.reject_content(judged.message)
        return ToolGuardrailFunctionOutput.raise_exception(judged.payload.wire())

    def close(self) -> None:
        """`aclose` from sync code (after `run_sync`)."""
        self.bridge.run(self.gate.aclose)
