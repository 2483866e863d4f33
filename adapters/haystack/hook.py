"""`PlanfenceHook`: PlanFence in a Haystack `Agent`, on the agent's own hook points.

Read side: before every model call (`before_llm`) the hook shows the model the current public
records, as a system message of its own right after the agent's system prompt (the previous one
replaced). When the model has answered with tool calls (`before_tool`, before any of them runs)
it stamps a plan whose parents are exactly the records shown for that answer, superseding the
run's previous plan.

Act side: a hook can drop or rewrite the pending calls, but it runs before the tools are
scheduled, so it cannot hold an allow's lease while the tool runs nor give each call its own
fencing token. So the gate stands in the tools themselves: `fence.tools([...])` gives the agent
each tool behind the gate, which runs it only on an allow, inside the allow's guard (its fencing
token `planfence.fence.current()`, its lease held until it returns). A refusal is the tool's
failure, the way Haystack reports any tool that failed: a `ToolInvocationError` whose message is
the refusal in words, which the agent gives the model as an error tool result (a replan names the
records that changed and their current values; the model calls again from the records it is
shown next). A tool the agent has that is not behind the gate, and that the policy does not
declare ungated, stops the run at the hook, before the model is called: a `ConfigError` naming it.

Each run has its own plan chain (the agent's `State` of that run, which it also hands to the
tools). A store that cannot be reached while the records are shown or the plan is stamped is no
exception in the run: the model is told the records cannot be read, and its gated calls are
blocked as `store_unavailable`. The hook and the tools work in `Agent.run` and `Agent.run_async`.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, get_type_hints

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
from planfence.plugins.gate.plans import PlanStamper
from planfence.shared_memory import AsyncStore, ConfigError, Record, Store, StoreBridge
from planfence.shared_memory.extras import extra_imports

from ..base import DEFAULT_HEADER, Adapter, read, reads_or_down, shown_text, stamp

with extra_imports("haystack", "planfence.adapters.haystack"):
    from haystack.components.agents.state.state import State
    from haystack.components.agents.state.state_utils import replace_values
    from haystack.dataclasses import ChatMessage, ChatRole
    from haystack.hooks import BEFORE_LLM, BEFORE_TOOL, Hook, HookPoint
    from haystack.tools.errors import ToolInvocationError
    from haystack.tools.from_function import create_tool_from_function
    from haystack.tools.tool import Tool

RECORDS = "planfence_records"
"""The `meta` key that marks the system message holding the records."""
_STATE = "planfence_state"


@dataclass
class _Run:
    """One run's side: its plan chain, what it was shown last, the plan from that."""

    stamper: PlanStamper
    shown: list[Record] | PlanUnavailable = field(default_factory=list)
    plan: str | PlanUnavailable | None = None
    fresh: bool = False  # records shown since the last stamp


class PlanfenceHook(Adapter):
    """A Haystack `Hook` for `before_llm` and `before_tool` (`hooks=fence.hooks()`) that shows
    the records and stamps plans from them, and the gate in front of the tools given to the agent
    through `tools`.

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
    """

    allowed_hook_points: ClassVar[tuple[str, ...]] = (BEFORE_LLM, BEFORE_TOOL)

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
        self._runs: weakref.WeakKeyDictionary[State, _Run] = weakref.WeakKeyDictionary()

    def hooks(self) -> dict[HookPoint, list[Hook]]:
        """The agent's `hooks`: this hook before every model call and before the tools run."""
        return {BEFORE_LLM: [self], BEFORE_TOOL: [self]}

    def _run(self, state: State) -> _Run:
        run = self._runs.get(state)
        if run is None:
            run = self._runs[state] = _Run(self.new_stamper())
        return run

    # ---- the hook: records before each model call, the plan before the tools

    def run(self, state: State) -> None:
        self.bridge.run(self.run_async, state)

    async def run_async(self, state: State) -> None:
        self._check_tools(state)
        if not self.keys and not self.prefixes:
            return
        messages = state.data.get("messages") or []
        if messages and messages[-1].is_from(ChatRole.ASSISTANT) and messages[-1].tool_calls:
            await self._stamp(state, messages[-1])
        else:
            await self._show(state, messages)

    def _check_tools(self, state: State) -> None:
        """Fail closed on a tool given to the agent without the gate: Haystack would run it
        unjudged. Only a tool the policy declares ungated may be given as it is."""
        bare = []
        for tool in state.data.get("tools") or ():
            declared = self.gate.policy.get(tool.name)
            if not isinstance(tool, _FencedTool) and not (declared and declared.ungated):
                bare.append(tool.name)
        if bare:
            raise ConfigError(
                f"the agent has tools the gate does not stand in: {', '.join(sorted(bare))}; "
                "give them as fence.tools([...]) (or declare them ungated in the policy)"
            )

    async def _show(self, state: State, messages: list[ChatMessage]) -> None:
        run = self._run(state)
        run.shown = await read(run.stamper, self.keys, self.prefixes)
        run.fresh = True
        records = ChatMessage.from_system(shown_text(self.header, run.shown), meta={RECORDS: True})
        kept = [m for m in messages if not m.meta.get(RECORDS)]
        at = 1 if kept and kept[0].is_from(ChatRole.SYSTEM) else 0
        state.set("messages", [*kept[:at], records, *kept[at:]], handler_override=replace_values)

    async def _stamp(self, state: State, answer: ChatMessage) -> None:
        run = self._run(state)
        if run.fresh:
            run.fresh = False
            value = {"agent": self.agent, "tool_calls": [c.tool_name for c in answer.tool_calls]}
            run.plan = await stamp(run.stamper, reads_or_down(run.shown), value=value)

    def close(self) -> None:
        """Close the gate (the agent's `close()` calls it): a deferred audit writes what it
        has queued."""
        self.bridge.run(self.gate.aclose)

    async def close_async(self) -> None:
        """`close` for `Agent.close_async()`."""
        await self.aclose()

    def to_dict(self) -> dict[str, Any]:
        """What the hook shows; its store and policy are the application's to give again."""
        return {
            "type": f"{type(self).__module__}.{type(self).__qualname__}",
            "init_parameters": {"keys": self.keys, "prefixes": self.prefixes, "agent": self.agent},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlanfenceHook:
        raise NotImplementedError(
            "a PlanfenceHook needs its store and policy: build it in code and pass it to the Agent"
        )

    # ---- act side: the tools behind the gate

    def tools(self, tools: Sequence[Tool | Callable[..., Any]]) -> list[Tool]:
        """`tools` (Haystack tools or plain functions) for the agent, each behind the gate."""
        return [self.tool(t) for t in tools]

    def tool(self, tool: Tool | Callable[..., Any]) -> Tool:
        """One tool (a Haystack `Tool`, or a function made one) behind the gate."""
        inner = tool if isinstance(tool, Tool) else create_tool_from_function(tool)
        return _FencedTool.around(self, inner)

    def _call(self, state: State | None, name: str, args: dict[str, Any]) -> ToolCall:
        plan = self._run(state).plan if state is not None else None
        return ToolCall(name, {k: v for k, v in args.items() if not isinstance(v, State)}, plan)


def _gated(planfence_state: State, **kwargs: Any) -> Any:
    """The signature the agent reads to hand a fenced tool its run's `State` (never called)."""
    raise NotImplementedError


async def _agated(planfence_state: State, **kwargs: Any) -> Any:
    raise NotImplementedError


def _state_params(tool: Tool) -> list[str]:
    """The parameters of the tool inside that take the run's `State` (the agent fills them)."""
    fn = tool.function or tool.async_function
    if fn is None:
        return []
    try:
        hints = get_type_hints(fn)
    except Exception:
        return []
    return [p for p in inspect.signature(fn).parameters if hints.get(p) is State]


class _FencedTool(Tool):
    """A tool the agent calls as it would the tool inside, which runs only on the gate's allow."""

    _fence: PlanfenceHook
    _inner: Tool
    _takes_state: list[str]

    @classmethod
    def around(cls, fence: PlanfenceHook, inner: Tool) -> _FencedTool:
        fenced = cls(
            name=inner.name,
            description=inner.description,
            parameters=inner.parameters,
            function=_gated if inner.function is not None else None,
            async_function=_agated,
        )
        # The inner tool's own state and output settings (already validated on it).
        fenced.inputs_from_state = inner.inputs_from_state
        fenced.outputs_to_state = inner.outputs_to_state
        fenced.outputs_to_string = inner.outputs_to_string
        fenced._fence, fenced._inner, fenced._takes_state = fence, inner, _state_params(inner)
        return fenced

    def _split(self, kwargs: dict[str, Any]) -> tuple[State | None, dict[str, Any]]:
        state = kwargs.pop(_STATE, None)
        args = {**kwargs, **dict.fromkeys(self._takes_state, state)}
        return state, args

    def invoke(self, **kwargs: Any) -> Any:
        state, args = self._split(kwargs)
        with self._fence.gate.guard_sync(self._fence._call(state, self.name, kwargs)) as judged:
            if not isinstance(judged, Refused):
                return self._inner.invoke(**args)
        raise ToolInvocationError(judged.message, tool_name=self.name)

    async def invoke_async(self, **kwargs: Any) -> Any:
        state, args = self._split(kwargs)
        async with self._fence.gate.guard(self._fence._call(state, self.name, kwargs)) as judged:
            if not isinstance(judged, Refused):
                return await self._inner.invoke_async(**args)
        raise ToolInvocationError(judged.message, tool_name=self.name)
