"""`PlanfenceReAct`: PlanFence as a `dspy.ReAct` module.

Read side: the signature gets one more input field, `records`. Before every model call of a run
(each step of the loop, and the final extraction) the module reads the current public records
and passes them in that field; the first tool call the model makes from that view stamps a plan
whose parents are exactly those records, superseding the run's previous plan. Act side: every
tool is a copy of the `dspy.Tool` whose function runs inside the gate, after DSPy has checked
its arguments against the tool's schema (a call DSPy rejects is DSPy's own retry and never
reaches the gate). An allowed tool runs with the allow's fencing token as
`planfence.fence.current()` and holds the lease its policy declares. A refusal is the tool's
observation in the trajectory, in words: a stale plan names the records that changed and their
current values, and the model redoes the call from the records shown on its next step (the
replan); a block says why and that the action will not run.

DSPy's callbacks (`BaseCallback.on_tool_start`) cannot stand there: they only observe, and an
exception raised in one is logged and swallowed, so the tool would run. The records are passed
where ReAct calls its predictors (`_call_with_potential_trajectory_truncation` and its async
twin, the one place every model call of the loop goes through); the module refuses to start on
a DSPy without them.

A store that cannot be reached while the records are read or the plan is stamped is no
exception in the run: the model is told the records cannot be read, and its gated calls are
blocked as `store_unavailable`.

Each call of the module (`forward` or `aforward`, `react(...)` or `await react.acall(...)`) is a
run with its own plan chain, so one module serves many runs, in threads or tasks, at once.
Copies made by DSPy (`deepcopy`, optimizers) share the gate.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from planfence.plugins.gate import (
    DEFAULT_AUDIT,
    AuditMode,
    Gate,
    Middleware,
    PlanStamper,
    Policy,
    Refused,
    ToolCall,
)
from planfence.plugins.gate.outage import PlanUnavailable, store_down
from planfence.shared_memory import AsyncStore, ConfigError, Record, Store, StoreBridge
from planfence.shared_memory.extras import extra_imports

from ..base import DEFAULT_HEADER, Adapter, read, reads_or_down, shown_text, stamp

with extra_imports("dspy", "planfence.adapters.dspy"):
    import dspy
    from dspy.signatures.signature import Signature, ensure_signature

RECORDS = "records"
"""The input field the records are shown in."""
_MODEL_CALLS = (
    "_call_with_potential_trajectory_truncation",
    "_async_call_with_potential_trajectory_truncation",
)
_T = TypeVar("_T")
_SHARED = frozenset({"gate", "bridge", "agent", "keys", "prefixes", "header"})


@dataclass
class _Run:
    """One call of the module: its plan chain, the records its last model call was shown, and
    whether its tools are called from async code."""

    fence: PlanfenceReAct
    stamper: PlanStamper
    aio: bool
    shown: list[Record] | PlanUnavailable = field(default_factory=list)
    fresh: bool = False  # shown on a model call no plan was stamped from yet
    plan: str | PlanUnavailable | None = None


_RUN: ContextVar[_Run | None] = ContextVar("planfence_dspy_run", default=None)


class PlanfenceReAct(Adapter, dspy.ReAct):  # type: ignore[misc]
    """A `dspy.ReAct` that shows the records, stamps plans from them, and gates every tool.

    Args:
        store: the store: a `Store`, an `AsyncStore`, a URL or a `StoreBridge`.
        policy: the declared scopes (a `Policy`, its dict form, or TOML text).
        gate: a `Gate` configured beyond these settings (see `Adapter.attach_gate`).
        middleware: gate middleware, outermost first.
        audit: how the gate records its decisions (see `Adapter.attach_gate`).
        signature: as for `dspy.ReAct`; it must not have an input named `records` (the module
            adds it).
        tools: as for `dspy.ReAct`: each runs behind the gate.
        max_iters: as for `dspy.ReAct`.
        keys: keys whose current version is shown to the model before every step.
        prefixes: key prefixes shown the same way.
        agent: plans are stored under `plans/<agent>` and audited as it.
        header: the first line of the records as shown.

    Raises:
        ConfigError: the signature already has a `records` field, or this DSPy's ReAct has no
            place to show the records before each model call.
    """

    def __init__(
        self,
        store: AsyncStore | Store | StoreBridge | str,
        policy: Policy | Mapping[str, Any] | str,
        signature: str | type[Signature],
        tools: Iterable[Callable[..., Any]],
        *,
        keys: Iterable[str] = (),
        prefixes: Iterable[str] = (),
        agent: str = "agent",
        gate: Gate | None = None,
        middleware: Iterable[Middleware] = (),
        audit: AuditMode = DEFAULT_AUDIT,
        header: str = DEFAULT_HEADER,
        max_iters: int = 20,
    ) -> None:
        missing = [m for m in _MODEL_CALLS if not callable(getattr(dspy.ReAct, m, None))]
        if missing:
            raise ConfigError(f"dspy {dspy.__version__}: ReAct has no {missing[0]}")
        self.keys, self.prefixes, self.header = list(keys), list(prefixes), header
        sig = ensure_signature(signature)
        if self._shows:
            if RECORDS in sig.fields:
                raise ConfigError(f"the signature already has a field named {RECORDS!r}")
            desc = "the current public records; plan from these values"
            sig = sig.prepend(RECORDS, dspy.InputField(desc=desc), type_=str)
        self.attach_gate(store, policy, agent=agent, gate=gate, middleware=middleware, audit=audit)
        fenced = [self._fence(t if isinstance(t, dspy.Tool) else dspy.Tool(t)) for t in tools]
        super().__init__(sig, tools=fenced, max_iters=max_iters)

    @property
    def _shows(self) -> bool:
        return bool(self.keys or self.prefixes)

    def __deepcopy__(self, memo: dict[int, Any]) -> PlanfenceReAct:
        """DSPy copies modules (optimizers, `load`): a copy's predictors are its own, its gate
        is this one's."""
        twin = object.__new__(type(self))
        memo[id(self)] = twin
        for name, value in self.__dict__.items():
            twin.__dict__[name] = value if name in _SHARED else copy.deepcopy(value, memo)
        return twin

    # ---- a run: its own plan chain

    def forward(self, **input_args: Any) -> Any:
        reset = _RUN.set(_Run(self, self.new_stamper(), aio=False))
        try:
            return super().forward(**input_args)
        finally:
            _RUN.reset(reset)

    async def aforward(self, **input_args: Any) -> Any:
        reset = _RUN.set(_Run(self, self.new_stamper(), aio=True))
        try:
            return await super().aforward(**input_args)
        finally:
            _RUN.reset(reset)

    def _mine(self) -> _Run | None:
        run = _RUN.get()
        return run if run is not None and run.fence.gate is self.gate else None

    # ---- read side: the records in the signature's input before every model call

    def _call_with_potential_trajectory_truncation(
        self, module: Any, trajectory: dict[str, Any], **input_args: Any
    ) -> Any:
        run = self._mine()
        if run is not None and self._shows:
            run.shown = self._blocking(read, run.stamper, self.keys, self.prefixes)
            run.fresh = True
            input_args[RECORDS] = shown_text(self.header, run.shown)
        return super()._call_with_potential_trajectory_truncation(module, trajectory, **input_args)

    async def _async_call_with_potential_trajectory_truncation(
        self, module: Any, trajectory: dict[str, Any], **input_args: Any
    ) -> Any:
        run = self._mine()
        if run is not None and self._shows:
            run.shown = await read(run.stamper, self.keys, self.prefixes)
            run.fresh = True
            input_args[RECORDS] = shown_text(self.header, run.shown)
        call = super()._async_call_with_potential_trajectory_truncation
        return await call(module, trajectory, **input_args)

    def _blocking(self, fn: Callable[..., Awaitable[_T]], *args: Any, **kw: Any) -> _T:
        """`read` or `stamp` from sync code: a store closed under the bridge is down too."""
        try:
            return self.bridge.run(fn, *args, **kw)
        except Exception as exc:
            if not store_down(exc):
                raise
            return cast(_T, PlanUnavailable.of(exc))

    def _stamp_value(self, tool: str) -> dict[str, Any]:
        return {"agent": self.agent, "tool": tool}

    def _plan(self, run: _Run | None, tool: str) -> str | PlanUnavailable | None:
        if run is not None and run.fresh:
            reads = reads_or_down(run.shown)
            run.plan = self._blocking(stamp, run.stamper, reads, value=self._stamp_value(tool))
            run.fresh = False
        return run.plan if run is not None else None

    async def _aplan(self, run: _Run | None, tool: str) -> str | PlanUnavailable | None:
        if run is not None and run.fresh:
            reads = reads_or_down(run.shown)
            run.plan = await stamp(run.stamper, reads, value=self._stamp_value(tool))
            run.fresh = False
        return run.plan if run is not None else None

    # ---- act side: each tool's function behind the gate

    def _fence(self, tool: dspy.Tool) -> dspy.Tool:
        """A copy of `tool` (its name, description and argument schema) whose function runs
        only on the gate's allow; DSPy validates the arguments before it is called."""
        fn, name = tool.func, str(tool.name)

        def gated(**args: Any) -> Any:
            run = self._mine()
            if run.aio if run is not None else _in_loop():
                return self._acall(run, name, fn, args)  # awaited by `Tool.acall`
            return self._call(run, name, fn, args)

        fenced: dspy.Tool = tool.model_copy(update={"func": gated})
        return fenced

    async def _acall(
        self, run: _Run | None, name: str, fn: Callable[..., Any], args: dict[str, Any]
    ) -> Any:
        call = ToolCall(name, args, await self._aplan(run, name))
        async with self.gate.guard(call) as judged:
            if not isinstance(judged, Refused):
                out = fn(**args)
                return await out if inspect.isawaitable(out) else out
        return judged.message

    def _call(
        self, run: _Run | None, name: str, fn: Callable[..., Any], args: dict[str, Any]
    ) -> Any:
        call = ToolCall(name, args, self._plan(run, name))
        with self.gate.guard_sync(call) as judged:
            if not isinstance(judged, Refused):
                out = fn(**args)
                return _drive(out) if inspect.iscoroutine(out) else out
        return judged.message

    def close(self) -> None:
        """`aclose` from sync code."""
        self.bridge.run(self.gate.aclose)


def _in_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _drive(coroutine: Any) -> Any:
    """An async tool called from sync code, as DSPy runs one: only when its settings allow it
    (inside the gate's block, so the tool still sees its fencing token)."""
    if dspy.settings.allow_tool_async_sync_conversion and not _in_loop():
        return asyncio.run(coroutine)
    coroutine.close()
    raise ValueError(
        "an async tool called from sync code: call the module with `acall`, or enable "
        "`dspy.configure(allow_tool_async_sync_conversion=True)`"
    )
