"""`PlanfenceFilter`: PlanFence as a Semantic Kernel auto function invocation filter.

Read side: `show(history)` puts the current public records in the chat history, as a system
message of their own; the filter keeps that message current: once every function call of a
model answer has been handled, it reads the records again and replaces the message, so the
model's next request shows them as they are now and nothing older as current. The first gated
call of a model answer stamps a plan whose parents are exactly the records that message showed
when the model answered; the calls of one answer share it, and each plan supersedes the
history's previous one (the chain lives in the message's metadata, so each chat history is a
run of its own).

Act side: the filter (`FilterTypes.AUTO_FUNCTION_INVOCATION`) judges each call before the
function runs. On an allow it calls `next`, inside the gate's block: the function runs with the
allow's fencing token as `planfence.fence.current()` and holds the lease its policy declares.
On a refusal it does not call `next`; the refusal in words is the function's result (its
`metadata["planfence"]` is the `RefusalPayload`'s wire form), which the kernel adds to the
history as the tool message: a stale plan names the records that changed and their current
values, and the model calls again from the records shown next (the replan); a block says why
and that the action will not run. Semantic Kernel checks the arguments against the function's
parameters before any filter runs, so a call it rejects never reaches the gate.

A store that cannot be reached while the records are shown or the plan is stamped is no
exception in the run: the message says the records cannot be read, and the gated calls are
blocked as `store_unavailable`. Any other failure on the way to a verdict is a block too.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
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
from planfence.plugins.gate.outage import PlanUnavailable, failure
from planfence.shared_memory import AsyncStore, Store, StoreBridge
from planfence.shared_memory.extras import extra_imports

from ..base import DEFAULT_HEADER, Adapter, read, reads_or_down, shown_text, stamp

with extra_imports("semantic-kernel", "planfence.adapters.semantic_kernel"):
    from semantic_kernel import Kernel
    from semantic_kernel.contents import AuthorRole, ChatHistory, ChatMessageContent
    from semantic_kernel.filters import AutoFunctionInvocationContext, FilterTypes
    from semantic_kernel.functions import FunctionResult

SOURCE = "planfence"
"""The metadata key of the records message (its state) and of a refusal's payload."""


class PlanfenceFilter(Adapter):
    """Shows the records in the chat history and gates every auto-invoked function.

    Args:
        store: the store: a `Store`, an `AsyncStore`, a URL or a `StoreBridge`.
        policy: the declared scopes (a `Policy`, its dict form, or TOML text).
        gate: a `Gate` configured beyond these settings (see `Adapter.attach_gate`).
        middleware: gate middleware, outermost first.
        audit: how the gate records its decisions (see `Adapter.attach_gate`).
        keys: keys whose current version `show` puts in the chat history.
        prefixes: key prefixes shown the same way.
        agent: plans are stored under `plans/<agent>` and audited as it.
        header: the first line of the records message.
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
        self._lock = asyncio.Lock()

    def install(self, kernel: Kernel) -> Kernel:
        """Add the filter to `kernel` (`FilterTypes.AUTO_FUNCTION_INVOCATION`), once."""
        self.uninstall(kernel)
        kernel.add_filter(FilterTypes.AUTO_FUNCTION_INVOCATION, self)
        return kernel

    def __deepcopy__(self, memo: dict[int, Any]) -> PlanfenceFilter:
        """`Kernel.clone()` deep-copies its filters (handoff orchestrations clone each agent's
        kernel): the clone keeps this filter, its gate and its store, never a copy of them."""
        return self

    def uninstall(self, kernel: Kernel) -> None:
        filters = kernel.auto_function_invocation_filters
        filters[:] = [(i, f) for i, f in filters if f is not self]

    def close(self) -> None:
        """`aclose` from sync code."""
        self.bridge.run(self.gate.aclose)

    # ---- read side: the records message in the chat history

    async def show(self, history: ChatHistory) -> ChatHistory:
        """Put the current records in `history` (replacing the ones shown before, or as a new
        system message after its leading system messages)."""
        found = _view(history)
        last = found[1].get("last") if found is not None else None
        records = await read(self.stamper, self.keys, self.prefixes)
        reads = reads_or_down(records)
        state = {
            "reads": None if isinstance(reads, PlanUnavailable) else reads,
            "down": reads.error if isinstance(reads, PlanUnavailable) else None,
            "plan": None,
            "last": last,
            "answer": None,
            "done": 0,
        }
        text = shown_text(self.header, records)
        if found is not None:  # in place: an agent's copy of a thread holds the same message
            message = history.messages[found[0]]
            message.content, message.metadata[SOURCE] = text, state
        else:
            message = ChatMessageContent(
                role=AuthorRole.SYSTEM, content=text, metadata={SOURCE: state}
            )
            at = next(
                (i for i, m in enumerate(history.messages) if m.role != AuthorRole.SYSTEM),
                len(history.messages),
            )
            history.messages.insert(at, message)
        return history

    async def _plan(
        self, state: dict[str, Any] | None, context: AutoFunctionInvocationContext
    ) -> str | PlanUnavailable | None:
        """The plan the calls of this model answer act under (none without records shown)."""
        if state is None:
            return None
        if state["down"]:
            return PlanUnavailable(str(state["down"]))
        if state["answer"] != context.request_sequence_index:  # a new answer, from this view
            state.update(answer=context.request_sequence_index, plan=None, done=0)
        if state["plan"] is None:
            value = {"agent": self.agent, "tool": context.function.name}
            stamped = await stamp(
                self.stamper, state["reads"], value=value, supersedes=state["last"]
            )
            if isinstance(stamped, PlanUnavailable):
                return stamped
            state.update(plan=stamped, last=stamped)
        return str(state["plan"])

    async def _handled(self, context: AutoFunctionInvocationContext) -> None:
        """One call of the answer handled; after the last, the records are shown again."""
        history, state = context.chat_history, _state(context.chat_history)
        if history is None or state is None:
            return
        state["done"] += 1
        if state["done"] >= max(context.function_count, 1):
            await self.show(history)

    # ---- act side: the filter around each function call

    async def __call__(
        self,
        context: AutoFunctionInvocationContext,
        next: Callable[[AutoFunctionInvocationContext], Awaitable[None]],
    ) -> None:
        tool = context.function.name
        args = dict(context.arguments or {})
        try:
            async with self._lock:
                plan = await self._plan(_state(context.chat_history), context)
        except Exception as exc:  # no plan could be stored: the call must not run
            self._refuse(context, Refused(failure(tool, None, self.gate.agent, exc)))
        else:
            async with self.gate.guard(ToolCall(tool, args, plan)) as judged:
                if judged.allowed:
                    await next(context)
            if isinstance(judged, Refused):
                self._refuse(context, judged)
        finally:
            async with self._lock:
                await self._handled(context)

    def _refuse(self, context: AutoFunctionInvocationContext, judged: Refused) -> None:
        context.function_result = FunctionResult(
            function=context.function.metadata,
            value=judged.message,
            metadata={SOURCE: judged.payload.wire()},
        )


def _view(history: ChatHistory | None) -> tuple[int, dict[str, Any]] | None:
    """The records message of `history` (its index and state), if records were shown in it."""
    for i, message in enumerate(history.messages if history is not None else ()):
        state = message.metadata.get(SOURCE)
        if isinstance(state, dict):
            return i, state
    return None


def _state(history: ChatHistory | None) -> dict[str, Any] | None:
    found = _view(history)
    return found[1] if found is not None else None
