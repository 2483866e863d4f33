"""`PlanfenceFunctionMiddleware`: PlanFence in a Microsoft Agent Framework agent, one object
registered in both of the agent's places.

As a context provider (`context_providers=[fence]`) it shows the model the current public records
in the run's instructions, and keeps which versions it showed in the session state. As function
middleware (`middleware=[fence]`) it gates every tool call: a gated call is checked under a plan
whose parents are exactly those versions (stamped at the run's first gated call). A replan
refusal is the tool's result (`context.result`, `call_next` not called): the model reads which
records changed, and its next call acts under a plan citing the versions the refusal showed, which
supersedes the refused one. A block ends the run (`MiddlewareTermination`, with the refusal as the
call's result). Each run starts a new chain: its first plan supersedes nothing.

The records are read once, as the run starts, so the instructions do not call them current: a
refusal names the newer versions (with their values), and those are what the replan cites.

The framework turns an ordinary exception in function middleware into a tool error and keeps
going; nothing here raises one on the way to a verdict: the gate answers every failure with a
block, and a plan that cannot be stored blocks the call too. A store that cannot be reached as
the run starts or when the plan is stamped is a `store_unavailable` block (the instructions say
the records cannot be read).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from planfence.plugins.gate import (
    DEFAULT_AUDIT,
    AuditMode,
    Gate,
    Judgement,
    Middleware,
    Policy,
    Refused,
    ToolCall,
)
from planfence.plugins.gate.outage import PlanUnavailable, failure
from planfence.plugins.gate.reads import reads_of, refreshed
from planfence.shared_memory import AsyncStore, Store
from planfence.shared_memory.extras import extra_imports

with extra_imports("maf", "planfence.adapters.maf"):
    from agent_framework import (
        AgentSession,
        Content,
        ContextProvider,
        FunctionInvocationContext,
        FunctionMiddleware,
        MiddlewareTermination,
        SessionContext,
        SupportsAgentRun,
    )

from ..base import Adapter, read, shown_text, stamp

SOURCE = "planfence"
HEADER = (
    "Public records as this run started (planfence shared memory); plan from these values, "
    "unless a refusal names a newer version:"
)


class PlanfenceFunctionMiddleware(Adapter, FunctionMiddleware, ContextProvider):
    """Shows the records (context provider) and gates every tool call (function middleware).

    Args:
        store: the store: a `Store`, an `AsyncStore`, a URL or a `StoreBridge`.
        policy: the declared scopes (a `Policy`, its dict form, or TOML text).
        gate: a `Gate` configured beyond these settings (see `Adapter.attach_gate`).
        middleware: gate middleware, outermost first.
        audit: how the gate records its decisions (see `Adapter.attach_gate`).
        keys: keys whose current version is shown to the model at the start of each run.
        prefixes: key prefixes shown the same way.
        agent: the agent id plans are stored under (`plans/<agent>`) and audited as.
        header: the first line of the records in the instructions.
    """

    def __init__(
        self,
        store: AsyncStore | Store,
        policy: Policy | Mapping[str, Any] | str,
        *,
        keys: Iterable[str] = (),
        prefixes: Iterable[str] = (),
        agent: str = "agent",
        gate: Gate | None = None,
        middleware: Iterable[Middleware] = (),
        audit: AuditMode = DEFAULT_AUDIT,
        header: str = HEADER,
    ) -> None:
        ContextProvider.__init__(self, SOURCE)
        self.attach_gate(store, policy, agent=agent, gate=gate, middleware=middleware, audit=audit)
        self.stamper = self.new_stamper()
        self.keys, self.prefixes, self.header = list(keys), list(prefixes), header
        self._stamping = asyncio.Lock()

    def close(self) -> None:
        """`aclose` from sync code (after `asyncio.run(agent.run(...))`)."""
        self.bridge.run(self.gate.aclose)

    async def before_run(
        self,
        *,
        agent: SupportsAgentRun,
        session: AgentSession,
        context: SessionContext,
        state: dict[str, Any],
    ) -> None:
        """A new run: show the current records; they are what its first plan cites."""
        records = await read(self.stamper, self.keys, self.prefixes)
        if records:
            context.extend_instructions(self.source_id, shown_text(self.header, records))
        down = records.error if isinstance(records, PlanUnavailable) else None
        reads = {} if isinstance(records, PlanUnavailable) else reads_of(records)
        state.update(reads=reads, down=down, plan=None, supersedes=None)

    async def process(
        self, context: FunctionInvocationContext, call_next: Callable[[], Awaitable[None]]
    ) -> None:
        run = _run_state(context.session, self.source_id)
        tool = context.function.name
        try:
            plan = await self._plan(run, tool)
        except Exception as exc:  # no plan could be stored: the call must not run
            self._refused(context, run, Refused(failure(tool, None, self.gate.agent, exc)))
            return
        # The tool runs inside the guard: the allow's fencing token is `planfence.fence.current()`
        # and the lease its policy declares is held until it returns.
        async with self.gate.guard(ToolCall(tool, _arguments(context.arguments), plan)) as judged:
            if judged.allowed:
                await call_next()
                return
        self._refused(context, run, judged)

    async def _plan(self, run: dict[str, Any] | None, tool: str) -> str | PlanUnavailable | None:
        """The plan a call acts under: none without records shown, or for an ungated tool."""
        declared = self.gate.policy.get(tool)
        if run is None or (declared is not None and declared.ungated):
            return None
        if run.get("down"):  # the records could not be read as the run started
            return PlanUnavailable(str(run["down"]))
        if not run.get("reads"):
            return None
        async with self._stamping:  # parallel calls of one model answer share one plan
            if run.get("plan") is None:
                stamped = await stamp(self.stamper, run["reads"], supersedes=run.get("supersedes"))
                if isinstance(stamped, PlanUnavailable):
                    return stamped
                run["plan"] = stamped
        return str(run["plan"])

    def _refused(
        self, context: FunctionInvocationContext, run: dict[str, Any] | None, judged: Judgement
    ) -> None:
        assert isinstance(judged, Refused)
        answer = [Content.from_text(judged.message, additional_properties=_payload(judged))]
        if not judged.replan:
            raise MiddlewareTermination(judged.message, result=answer)
        if run is not None:  # the refusal showed what changed: the replan cites those versions
            run.update(
                reads=refreshed(run.get("reads"), judged.current),
                plan=None,
                supersedes=run.get("plan"),
            )
        context.result = answer


def _payload(judged: Refused) -> dict[str, Any]:
    return {"planfence": judged.payload.wire()}


def _run_state(session: AgentSession | None, source: str) -> dict[str, Any] | None:
    """This run's read side, kept by the context provider in the session state."""
    state = session.state.get(source) if session is not None else None
    return state if isinstance(state, dict) and "reads" in state else None


def _arguments(arguments: Any) -> dict[str, Any]:
    return dict(arguments) if isinstance(arguments, Mapping) else dict(arguments.model_dump())


__all__ = ["PlanfenceFunctionMiddleware"]
