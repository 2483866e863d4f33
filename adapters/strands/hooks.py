"""`PlanfenceHookProvider`: PlanFence as a Strands Agents hook provider.

Read side: before each model call (`BeforeModelCallEvent`) the current public records are added
to the agent's system prompt as a block of their own, replacing the one shown before, and taken
out again after the call (`AfterModelCallEvent`), so the agent's own prompt is what its user set
between calls; when the model answers with tool uses, a plan is stamped whose parents are exactly
the records shown for that call, superseding the invocation's previous plan. Act side: the gate
judges each tool use on `BeforeToolCallEvent`, registered last (`HookOrder.SDK_LAST`), so it
judges the tool and input the other hooks leave. A refusal cancels the tool (`cancel_tool`):
Strands puts the refusal in words into a tool result with status `"error"`, which the model
reads. A stale plan's refusal names the records that changed and their current values, and the
model redoes the call from the records shown on its next call: the replan. A block says the
action will not run, followed by the `RefusalPayload`'s wire form. An allowed tool runs with the
allow's fencing token as `planfence.fence.current()`; the lease its policy declares is released on
`AfterToolCallEvent`.

Each invocation (`BeforeInvocationEvent`) starts a new plan chain for its agent, so a run after a
blocked one gets its own replan; one provider can serve several agents. A store that cannot be
reached while the records are shown or the plan is stamped is no exception in the run: the model
is told the records cannot be read, and its gated calls are blocked as `store_unavailable`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
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
from planfence.shared_memory import AsyncStore, Record, Store, StoreBridge
from planfence.shared_memory.extras import extra_imports

from ..base import (
    DEFAULT_HEADER,
    UNREADABLE,
    Adapter,
    read,
    reads_or_down,
    shown_text,
    stamp,
)

with extra_imports("strands", "planfence.adapters.strands"):
    from strands.hooks import (
        AfterInvocationEvent,
        AfterModelCallEvent,
        AfterToolCallEvent,
        BeforeInvocationEvent,
        BeforeModelCallEvent,
        BeforeToolCallEvent,
        HookOrder,
        HookProvider,
        HookRegistry,
    )


@dataclass
class _Run:
    """One agent's invocation: its plan chain, the records its last model call showed."""

    stamper: PlanStamper
    shown: list[Record] | PlanUnavailable = field(default_factory=list)
    fresh: bool = False  # shown on a model call no plan was stamped from yet
    plan: str | PlanUnavailable | None = None
    interrupted: bool = False  # ended at an interrupt: the next invocation resumes it


class PlanfenceHookProvider(Adapter, HookProvider):
    """Shows the records, stamps plans from them, and gates every tool call of the agents it is
    given to (`Agent(hooks=[fence])`).

    Args:
        store: the store: a `Store`, an `AsyncStore`, a URL or a `StoreBridge`.
        policy: the declared scopes (a `Policy`, its dict form, or TOML text).
        gate: a `Gate` configured beyond these settings (see `Adapter.attach_gate`).
        middleware: gate middleware, outermost first.
        audit: how the gate records its decisions (see `Adapter.attach_gate`).
        keys: keys whose current version is shown before every model call.
        prefixes: key prefixes shown the same way.
        agent: plans are stored under `plans/<agent>` and audited as it.
        header: the line above the records in the system prompt.
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
        self._runs: dict[int, _Run] = {}  # id(Strands agent) -> its current invocation
        # (id(Strands agent), toolUseId) -> an allowed call between its before and after hooks
        self._open: dict[tuple[int, str], tuple[Judgement, AbstractContextManager[Any]]] = {}

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        registry.add_callback(BeforeInvocationEvent, self._new_run)
        registry.add_callback(BeforeModelCallEvent, self._show, order=HookOrder.SDK_LAST)
        registry.add_callback(AfterModelCallEvent, self._plan_from_shown)
        registry.add_callback(BeforeToolCallEvent, self._before_tool, order=HookOrder.SDK_LAST)
        registry.add_callback(AfterToolCallEvent, self._after_tool)
        registry.add_callback(AfterInvocationEvent, self._end_run)

    def _run(self, strands_agent: Any) -> _Run:
        found = self._runs.get(id(strands_agent))
        if found is None:
            found = self._runs[id(strands_agent)] = _Run(self.new_stamper())
        return found

    async def _new_run(self, event: BeforeInvocationEvent) -> None:
        """An invocation: its agent starts a new plan chain (each run its own replan), unless
        it resumes one stopped by an interrupt (its pending calls keep their plan)."""
        await self._finish_left(event.agent)
        run = self._runs.get(id(event.agent))
        if run is not None and run.interrupted:
            run.interrupted = False
        else:
            self._runs[id(event.agent)] = _Run(self.new_stamper())

    async def _end_run(self, event: AfterInvocationEvent) -> None:
        await self._finish_left(event.agent)
        if event.result is not None and event.result.stop_reason == "interrupt":
            self._run(event.agent).interrupted = True
        else:
            self._runs.pop(id(event.agent), None)

    # ---- read side: the records before every model call, the plan from what was shown

    @property
    def _reads(self) -> bool:
        return bool(self.keys or self.prefixes)

    async def _show(self, event: BeforeModelCallEvent) -> None:
        if not self._reads:
            return
        run = self._run(event.agent)
        run.shown = await read(run.stamper, self.keys, self.prefixes)
        blocks = _theirs(event.agent, self.header)
        event.agent.system_prompt = [*blocks, {"text": shown_text(self.header, run.shown)}]
        run.fresh = True

    async def _plan_from_shown(self, event: AfterModelCallEvent) -> None:
        if not self._reads:
            return
        blocks = _theirs(event.agent, self.header)  # the agent's own prompt back
        event.agent.system_prompt = blocks or None
        run = self._run(event.agent)
        response = event.stop_response
        content = response.message.get("content", []) if response is not None else []
        tools = [c["toolUse"]["name"] for c in content if "toolUse" in c]
        if run.fresh and tools:
            value = {"agent": self.agent, "tool_calls": tools}
            run.plan = await stamp(run.stamper, reads_or_down(run.shown), value=value)
        run.fresh = False

    # ---- act side: the gate between the before- and after-tool-call hooks

    async def _before_tool(self, event: BeforeToolCallEvent) -> None:
        if event.cancel_tool or _interrupted(event):  # another hook stopped it: it will not run
            return
        use = event.tool_use
        tool = event.selected_tool.tool_name if event.selected_tool is not None else use["name"]
        given = use.get("input")
        args = dict(given) if isinstance(given, Mapping) else {"_unparsed": given}
        run = self._runs.get(id(event.agent))
        judged = await self.gate.judge(ToolCall(tool, args, run.plan if run else None))
        if isinstance(judged, Refused):
            event.cancel_tool = _refusal(judged)
            return
        # The tool runs in this task, right after: its token is current until it returns.
        binding = bound(judged.fence)
        binding.__enter__()
        self._open[(id(event.agent), str(use.get("toolUseId")))] = (judged, binding)

    async def _after_tool(self, event: AfterToolCallEvent) -> None:
        key = (id(event.agent), str(event.tool_use.get("toolUseId")))
        await self._finish(self._open.pop(key, None))

    async def _finish(self, opened: tuple[Judgement, AbstractContextManager[Any]] | None) -> None:
        if opened is not None:
            judged, binding = opened
            binding.__exit__(None, None, None)
            await self.gate.release(judged)

    async def _finish_left(self, strands_agent: Any) -> None:
        """Release what allowed calls whose after-hook never ran (an interrupt) still hold."""
        for key in [k for k in self._open if k[0] == id(strands_agent)]:
            await self._finish(self._open.pop(key))

    def close(self) -> None:
        """`aclose` from sync code (after `agent(...)`)."""
        self.bridge.run(self.gate.aclose)


def _refusal(judged: Refused) -> str:
    """The refusal as the tool result's text: in words; a block also as its wire payload."""
    if judged.replan:
        return judged.message
    return judged.message + "\n" + json.dumps(judged.payload.wire())


def _interrupted(event: BeforeToolCallEvent) -> bool:
    """Whether an earlier hook interrupted this call, waiting for a person's answer (the call
    does not run now; it is judged when the agent resumes)."""
    state = getattr(event.agent, "_interrupt_state", None)
    prefix = f"v1:before_tool_call:{event.tool_use.get('toolUseId')}:"
    waiting = getattr(state, "interrupts", {}).values()
    return any(i.id.startswith(prefix) and i.response is None for i in waiting)


def _theirs(strands_agent: Any, header: str) -> list[Any]:
    """The agent's system prompt blocks without the records block a fence added."""
    unreadable = UNREADABLE.split("{", 1)[0]
    blocks = strands_agent.system_prompt_content or []
    return [b for b in blocks if not str(b.get("text", "")).startswith((header, unreadable))]
