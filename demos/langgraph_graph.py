"""A LangChain agent (`create_agent`) that books a trip behind the PlanFence gate.

    python -m planfence.demos.langgraph_graph [--stale-again] [--baseline] [--sync] [--store URL]

The model reads the trip requirements; while it is deciding, the customer changes them; its
booking call carries the old plan. The gate refuses, the model replans once from the current
requirements, and the booking runs with the new destination. `--stale-again`: the customer
changes twice and the second stale plan is blocked. `--baseline`: the freshness-only check books
the stale destination. The demo runs in a temporary store, removed when it ends, unless
`--store URL` names one to keep the records in.

Uses a real model when PLANFENCE_LLM_MODEL is set (PLANFENCE_LLM_BASE_URL, PLANFENCE_LLM_API_KEY;
any OpenAI-compatible endpoint, needs `pip install langchain-openai`); a scripted model otherwise.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain.agents.middleware.types import ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool

from planfence.adapters.langgraph import PlanfenceAgentMiddleware
from planfence.demos.executors import on_baseline
from planfence.plugins.gate import Policy
from planfence.shared_memory import PlanfenceError, Store, open_store

from .support import demo_store, team_demo_args, team_demo_parser

REQ = "trip/42/requirements"
POLICY = Policy().declare("book_flight", depends_on=[REQ])
SYSTEM = "You book trips. Call book_flight once with the destination from the current records."


class ScriptedModel(FakeMessagesListChatModel):
    """A scripted chat model that accepts tools (the fake models in langchain-core do not)."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:
        return self


def _book(destination: str, n: int) -> AIMessage:
    call = {"name": "book_flight", "args": {"destination": destination}, "id": f"call-{n}"}
    return AIMessage(content="", tool_calls=[call])


def real_model() -> BaseChatModel | None:
    """An OpenAI-compatible chat model from PLANFENCE_LLM_* variables, or None when unset."""
    model = os.environ.get("PLANFENCE_LLM_MODEL")
    if not model:
        return None
    try:
        from langchain_openai import ChatOpenAI
    except ImportError:
        sys.exit("PLANFENCE_LLM_MODEL is set: pip install langchain-openai to use it")
    return ChatOpenAI(  # type: ignore[no-any-return]
        model=model,
        base_url=os.environ.get("PLANFENCE_LLM_BASE_URL") or None,
        api_key=os.environ.get("PLANFENCE_LLM_API_KEY") or "not-needed",
        temperature=0,
    )


class CustomerChangesTheirMind(AgentMiddleware):
    """While the model decides, the customer (owner of the requirements) revises them."""

    def __init__(self, store: Store, changes: Sequence[str]) -> None:
        super().__init__()
        self.store = store
        self.changes = list(changes)

    def _change(self) -> None:
        if self.changes:
            destination = self.changes.pop(0)
            self.store.put(REQ, {"destination": destination}, author="customer")

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: Callable[[ModelRequest[Any]], ModelResponse]
    ) -> ModelResponse:
        response = handler(request)
        self._change()
        return response

    async def awrap_model_call(self, request: ModelRequest[Any], handler: Any) -> ModelResponse:
        response = await handler(request)
        await asyncio.to_thread(self._change)
        return response  # type: ignore[no-any-return]


@dataclass
class DemoResult:
    booked: list[str] = field(default_factory=list)
    outcome: dict[str, Any] = field(default_factory=dict)
    replans: int = 0
    lines: list[str] = field(default_factory=list)
    store: str = ""  # the line saying which store the demo used


def build(
    store: Store, booked: list[str], *, stale_again: bool, baseline: bool, scripted: bool | None
) -> tuple[Any, PlanfenceAgentMiddleware]:
    @tool
    def book_flight(destination: str) -> str:
        """Book the trip's flight to `destination`."""
        booked.append(destination)
        return f"booked a flight to {destination}"

    script = [_book("Lisbon", 0)] if baseline else [_book("Lisbon", 0), _book("Porto", 1)]
    model = (None if scripted else real_model()) or ScriptedModel(
        responses=[*script, AIMessage(content="Booked.")]
    )
    changes = ["Porto", "Madrid"] if stale_again else ["Porto"]
    fence = PlanfenceAgentMiddleware(
        store,
        POLICY,
        keys=[REQ],
        agent="booker",
    )
    if baseline:  # the freshness-only control judges instead of the gate
        on_baseline(fence.gate)
    # The fence is outermost, so it shows the model the records before the customer's change.
    middleware: list[AgentMiddleware[Any, Any, Any]] = [
        fence,
        CustomerChangesTheirMind(store, changes),
    ]
    return create_agent(model, [book_flight], system_prompt=SYSTEM, middleware=middleware), fence


def describe(messages: Sequence[BaseMessage]) -> list[str]:
    lines = []
    for m in messages:
        if isinstance(m, AIMessage) and m.tool_calls:
            calls = ", ".join(f"{c['name']}({c['args']})" for c in m.tool_calls)
            lines.append(f"model: calls {calls}")
        elif isinstance(m, ToolMessage):
            lines.append(f"tool [{m.status}]: {m.content}")
        else:
            lines.append(f"{m.type}: {m.content}")
    return lines


def run(
    *,
    stale_again: bool = False,
    baseline: bool = False,
    scripted: bool | None = None,
    use_async: bool = True,
    store_url: str | None = None,
) -> DemoResult:
    """Play the story in `store_url` (default: a temporary store, removed afterwards)."""
    out = DemoResult()
    with demo_store(store_url) as where, open_store(where.url) as store:
        out.store = where.line()
        if store.owner(REQ) is None:  # a kept store may hold the trip from an earlier run
            store.own(REQ, "customer")
        store.put(REQ, {"destination": "Lisbon"}, author="customer")
        agent, fence = build(
            store, out.booked, stale_again=stale_again, baseline=baseline, scripted=scripted
        )
        task = {"messages": [{"role": "user", "content": "Book the flight for trip 42."}]}
        try:
            state = asyncio.run(agent.ainvoke(task)) if use_async else agent.invoke(task)
        finally:
            fence.close()  # the gate's deferred audit writes the allows it queued
    out.outcome = state.get("planfence_outcome") or {}
    out.replans = state.get("planfence_replans", 0)
    out.lines = describe(state["messages"])
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = team_demo_parser(__doc__, baseline="freshness-only check")
    parser.add_argument("--sync", action="store_true", help="invoke instead of ainvoke")
    args = team_demo_args(parser, argv)
    try:
        result = run(
            stale_again=args.stale_again,
            baseline=args.baseline,
            scripted=args.scripted or None,
            use_async=not args.sync,
            store_url=args.store,
        )
    except PlanfenceError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    print(result.store)
    print("\n".join(result.lines))
    status = result.outcome.get("status")
    print(f"-- outcome: {status} ({result.outcome.get('reason')}), replans: {result.replans}")
    print(f"-- booked: {result.booked}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
