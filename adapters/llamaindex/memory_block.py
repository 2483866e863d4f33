"""`PlanfenceMemoryBlock`: PlanFence in a LlamaIndex agent workflow (`FunctionAgent`,
`ReActAgent`, `AgentWorkflow`).

Read side: the adapter is a memory block. Given to the run's `Memory`
(`Memory.from_defaults(memory_blocks=[fence])`), it shows the model the current public records in
the system message each time the agent reads its memory, which the agent does before every model
call. The plan for a turn's tool calls is stamped when the first of them reaches the gate; its
parents are exactly the records shown for that turn, and it supersedes the run's previous plan.

Act side: LlamaIndex offers no place before a tool runs that can stop it (the agent's `ToolCall`
event goes straight to its own `call_tool` step; instrumentation handlers only observe, and
their exceptions are swallowed; a `FunctionTool` callback runs after the function). So the gate
wraps the tools: `fence.tools([...])` gives each tool to the agent behind the gate, which runs
it only on an allow, with the allow's fencing token as `planfence.fence.current()` and the lease
its policy declares held until it returns. A refusal is the tool's output, as any tool error is:
a `ToolOutput` with `is_error=True` whose text is the refusal in words (a replan names the
records that changed and their current values; the model calls again from the records it is
shown next) and whose `raw_output` is the `RefusalPayload`'s wire form. A tool in an agent's
`tools` that is not behind the gate (nor declared ungated) stops the run when the block is first
read, before the model is called: a `ConfigError` naming it.

Each workflow run has its own plan chain (found through the step's `Context`), so one agent and
one block serve many runs. A store that cannot be reached while the records are shown or the plan
is stamped is no exception in the run: the model is told the records cannot be read, and its
gated calls are blocked as `store_unavailable`.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from planfence.plugins.gate import (
    DEFAULT_AUDIT,
    AuditMode,
    Gate,
    GateMiddleware,
    Middleware,
    Policy,
    Refused,
    ToolCall,
)
from planfence.plugins.gate.outage import PlanUnavailable
from planfence.plugins.gate.plans import PlanStamper
from planfence.shared_memory import AsyncStore, ConfigError, Record, Store, StoreBridge
from planfence.shared_memory.extras import extra_imports

from ..base import DEFAULT_HEADER, Adapter, read, reads_or_down, shown_text, stamp

with extra_imports("llamaindex", "planfence.adapters.llamaindex"):
    from llama_index.core.async_utils import asyncio_run
    from llama_index.core.bridge.pydantic import Field, PrivateAttr
    from llama_index.core.llms import ChatMessage
    from llama_index.core.memory.memory import BaseMemoryBlock
    from llama_index.core.tools import (
        AsyncBaseTool,
        BaseTool,
        FunctionTool,
        ToolMetadata,
        ToolOutput,
        adapt_to_async_tool,
    )
    from llama_index.core.workflow import Context
    from workflows.errors import WorkflowRuntimeError


@dataclass
class _Run:
    """One workflow run's side: its plan chain, what it was shown last, the plan from that."""

    stamper: PlanStamper
    shown: list[Record] | PlanUnavailable = field(default_factory=list)
    plan: str | PlanUnavailable | None = None
    fresh: bool = False  # records shown since the last stamp
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class PlanfenceMemoryBlock(Adapter, BaseMemoryBlock[str]):
    """Shows the records in the system message, stamps plans from them, and gates the tools
    given to the agent through `tools`.

    Args:
        store: the store: a `Store`, an `AsyncStore`, a URL or a `StoreBridge`.
        policy: the declared scopes (a `Policy`, its dict form, or TOML text).
        gate: a `Gate` configured beyond these settings (see `Adapter.attach_gate`).
        middleware: gate middleware, outermost first.
        audit: how the gate records its decisions (see `Adapter.attach_gate`).
        keys: keys whose current version is shown to the model before every model call.
        prefixes: key prefixes shown the same way.
        agent: plans are stored under `plans/<agent>` and audited as it.
        header: the line above the records.
        name: the block's name in the memory (unique among its blocks).
    """

    # planfence's side (set by `attach_gate`), kept out of the block's serialised form
    bridge: StoreBridge = Field(default=cast(Any, None), exclude=True, repr=False)
    gate: GateMiddleware = Field(default=cast(Any, None), exclude=True, repr=False)
    agent: str | None = Field(default=None, exclude=True)
    keys: list[str] = Field(default_factory=list)
    prefixes: list[str] = Field(default_factory=list)
    header: str = DEFAULT_HEADER
    _runs: weakref.WeakKeyDictionary[Any, _Run] = PrivateAttr(
        default_factory=weakref.WeakKeyDictionary
    )
    _outside: _Run | None = PrivateAttr(default=None)

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
        name: str = "public_records",
    ) -> None:
        super().__init__(
            name=name,
            description="The team's shared records, current as of this model call.",
        )
        self.keys, self.prefixes, self.header = list(keys), list(prefixes), header
        self.attach_gate(store, policy, agent=agent, gate=gate, middleware=middleware, audit=audit)

    def _run(self) -> _Run:
        """The current workflow run's side (the block's own outside a workflow)."""
        try:
            key = Context.get_step_context().store
        except WorkflowRuntimeError:
            if self._outside is None:
                self._outside = _Run(self.new_stamper())
            return self._outside
        run = self._runs.get(key)
        if run is None:
            run = self._runs[key] = _Run(self.new_stamper())
        return run

    # ---- read side: the records in the system message

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        self._check_tools()
        if not self.keys and not self.prefixes:
            return ""
        run = self._run()
        run.shown = await read(run.stamper, self.keys, self.prefixes)
        run.fresh = True
        return shown_text(self.header, run.shown)

    def _check_tools(self) -> None:
        """Fail closed on a tool given to the run's agents without the gate: LlamaIndex would
        run it unjudged. Only a tool the policy declares ungated may be given as it is. (The
        workflow is found through the step's context, where this LlamaIndex keeps it.)"""
        try:
            workflow = getattr(Context.get_step_context()._face, "_workflow", None)
        except WorkflowRuntimeError:
            return
        agents = getattr(workflow, "agents", None)
        bare = set()
        for agent in agents.values() if isinstance(agents, Mapping) else [workflow]:
            for tool in getattr(agent, "tools", None) or ():
                name = _name(tool)
                declared = self.gate.policy.get(name)
                if not isinstance(tool, _FencedTool) and not (declared and declared.ungated):
                    bare.add(name)
        if bare:
            raise ConfigError(
                f"the agent has tools the gate does not stand in: {', '.join(sorted(bare))}; "
                "give them as fence.tools([...]) (or declare them ungated in the policy)"
            )

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """The records live in the shared store: the conversation adds nothing to them."""

    async def _plan(self, tool: str) -> str | PlanUnavailable | None:
        """The plan citing what the run was shown for this turn (stamped by its first call)."""
        run = self._run()
        async with run.lock:
            if run.fresh:
                run.fresh = False
                value = {"agent": self.agent, "tool_calls": [tool]}
                run.plan = await stamp(run.stamper, reads_or_down(run.shown), value=value)
            return run.plan

    # ---- act side: the tools behind the gate

    def tools(
        self, tools: Sequence[BaseTool | Callable[..., Any]]
    ) -> list[BaseTool | Callable[..., Any]]:
        """`tools` (LlamaIndex tools or plain functions) for the agent, each behind the gate."""
        return [self.tool(t) for t in tools]

    def tool(self, tool: BaseTool | Callable[..., Any]) -> BaseTool:
        """One tool (a LlamaIndex tool, or a function made a `FunctionTool`) behind the gate."""
        inner = tool if isinstance(tool, BaseTool) else FunctionTool.from_defaults(tool)
        return _FencedTool(self, adapt_to_async_tool(inner))

    async def _call(
        self, inner: AsyncBaseTool, positional: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> ToolOutput:
        name = inner.metadata.get_name()
        args = dict(kwargs)
        if isinstance(inner, FunctionTool) and inner.ctx_param_name is not None:
            args.pop(inner.ctx_param_name, None)
        if positional:  # `tool(input)`: the gate sees it as `args`
            args["args"] = list(positional)
        async with self.gate.guard(ToolCall(name, args, await self._plan(name))) as judged:
            if not isinstance(judged, Refused):
                return await inner.acall(*positional, **_with_context(inner, kwargs))
        return ToolOutput(
            content=judged.message,
            tool_name=name,
            raw_input=args,
            raw_output=judged.payload.wire(),
            is_error=True,
        )


def _name(tool: Any) -> str:
    if isinstance(tool, BaseTool):
        return str(tool.metadata.get_name())
    return str(getattr(tool, "__name__", tool))


def _with_context(inner: AsyncBaseTool, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The agent hands the step's `Context` only to a `FunctionTool` that asks for one: hand it
    on to the tool inside."""
    name = inner.ctx_param_name if isinstance(inner, FunctionTool) else None
    if name is None or name in kwargs:
        return kwargs
    return {**kwargs, name: Context.get_step_context()}


class _FencedTool(AsyncBaseTool):
    """A tool the agent calls as it would the tool inside, which runs only on the gate's allow."""

    def __init__(self, fence: PlanfenceMemoryBlock, inner: AsyncBaseTool) -> None:
        self._fence, self._inner = fence, inner

    @property
    def metadata(self) -> ToolMetadata:
        return self._inner.metadata

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        return await self._fence._call(self._inner, args, kwargs)

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        return asyncio_run(self.acall(*args, **kwargs))  # type: ignore[no-any-return]
