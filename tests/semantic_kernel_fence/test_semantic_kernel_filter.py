"""`PlanfenceFilter`: the docs example runs, the records message is kept current in the chat
history, a refusal is the function's result (`next` not called), a fault is a block, and the
kernel's own argument check comes before the filter."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

pytest.importorskip(
    "semantic_kernel",
    reason="Semantic Kernel runs in its own venv: pip install 'planfence[semantic-kernel]'",
)

from docpages import block
from semantic_kernel import Kernel
from semantic_kernel.agents import ChatCompletionAgent, ChatHistoryAgentThread
from semantic_kernel.connectors.ai import FunctionChoiceBehavior, PromptExecutionSettings
from semantic_kernel.connectors.ai.chat_completion_client_base import ChatCompletionClientBase
from semantic_kernel.contents import (
    AuthorRole,
    ChatHistory,
    ChatMessageContent,
    FunctionCallContent,
    FunctionResultContent,
)
from semantic_kernel.functions import KernelArguments, kernel_function

from planfence.adapters.semantic_kernel import PlanfenceFilter
from planfence.fence import current
from planfence.plugins.gate import Middleware, Policy, ToolCall, find_decisions_sync
from planfence.plugins.gate.middleware import CallNext, Judgement
from planfence.shared_memory import Store, open_store

REQ = "trip/42/requirements"
POLICY = Policy().declare("book_flight", depends_on=[REQ]).declare("check_weather", ungated=True)
TASK = "Book the flight for trip 42."
PAGE = "docs/frameworks/semantic-kernel.md"


def test_the_docs_example_runs(capsys: Any, tmp_path: Path) -> None:
    code = block(PAGE, "Example")
    url = f"sqlite:///{tmp_path / 'team.db'}"  # on a file, what it wrote is read back after
    code = code.replace('open_store("memory://")', f"open_store({url!r})")
    exec(compile(code, PAGE, "exec"), {"__name__": "docs"})
    assert capsys.readouterr().out.strip() == "Booked."
    store = open_store(url)
    try:
        [allow] = find_decisions_sync(store, source="gate")
        assert (allow.verdict, allow.reason) == ("allow", "current")
        assert store.get(allow.plan).parents == (store.head(REQ),)  # exactly what was shown
    finally:
        store.close()


@pytest.fixture
def store() -> Any:
    s = open_store("memory://")
    s.own(REQ, "customer")
    s.put(REQ, {"destination": "Lisbon"}, author="customer")
    yield s
    s.close()


Decide = Callable[[list[ChatMessageContent]], list[dict[str, Any]] | str]


class Chat(ChatCompletionClientBase):  # type: ignore[misc]
    """Each request: `decide(messages)` gives the calls to make (name and arguments), or the
    final text; every request's messages are kept."""

    SUPPORTS_FUNCTION_CALLING: ClassVar[bool] = True
    decide: Any = None
    seen: Any = None

    async def _inner_get_chat_message_contents(
        self, chat_history: ChatHistory, settings: PromptExecutionSettings
    ) -> list[ChatMessageContent]:
        self.seen.append([m.model_copy(deep=True) for m in chat_history.messages])
        out = self.decide(chat_history.messages)
        if isinstance(out, str):
            return [ChatMessageContent(role=AuthorRole.ASSISTANT, content=out)]
        items = [
            FunctionCallContent(
                id=f"c{i}", name=f"trip-{c['name']}", arguments=json.dumps(c["args"])
            )
            for i, c in enumerate(out)
        ]
        return [ChatMessageContent(role=AuthorRole.ASSISTANT, items=items)]


def results(messages: list[ChatMessageContent]) -> list[FunctionResultContent]:
    return [i for m in messages for i in m.items if isinstance(i, FunctionResultContent)]


def records(messages: list[ChatMessageContent]) -> list[str]:
    return [str(m.content) for m in messages if "planfence" in m.metadata]


class Trip:
    def __init__(self) -> None:
        self.booked: list[str] = []
        self.tokens: list[Any] = []

    @kernel_function
    def book_flight(self, destination: str) -> str:
        """Book the trip's flight."""
        self.booked.append(destination)
        self.tokens.append(current())
        return f"booked a flight to {destination}"

    @kernel_function
    def check_weather(self, destination: str) -> str:
        """The weather at the destination."""
        return f"weather at {destination}: sunny"


async def run(
    store: Store, decide: Decide, *, show: bool = True, **options: Any
) -> tuple[Trip, Chat, ChatHistory]:
    trip = Trip()
    fence = PlanfenceFilter(store, POLICY, keys=[REQ], agent="booker", **options)
    kernel = fence.install(Kernel())
    kernel.add_plugin(trip, "trip")
    history = await fence.show(ChatHistory()) if show else ChatHistory()
    history.add_user_message(TASK)
    chat = Chat(ai_model_id="scripted", decide=decide, seen=[])
    settings = PromptExecutionSettings(function_choice_behavior=FunctionChoiceBehavior.Auto())
    await chat.get_chat_message_content(history, settings, kernel=kernel)
    await fence.aclose()
    return trip, chat, history


def book(destination: str) -> list[dict[str, Any]]:
    return [{"name": "book_flight", "args": {"destination": destination}}]


def verdicts(store: Store) -> list[tuple[str, str]]:
    return sorted((d.verdict, d.reason) for d in find_decisions_sync(store, source="gate"))


async def test_a_stale_plan_is_the_result_and_the_next_request_shows_the_current_records(
    store: Store,
) -> None:
    def decide(messages: list[ChatMessageContent]) -> list[dict[str, Any]] | str:
        done = results(messages)
        if not done:
            store.put(REQ, {"destination": "Porto"}, author="customer")  # while it thinks
            return book("Lisbon")
        return "Booked." if len(done) > 1 else book("Porto")

    trip, chat, history = await run(store, decide)
    assert trip.booked == ["Porto"] and trip.tokens[0] is not None
    refusal = results(history.messages)[0]
    assert str(refusal.result).startswith("planfence refused book_flight")
    assert '{"destination":"Porto"}' in str(refusal.result)
    assert refusal.metadata["planfence"]["verdict"] == "replan"
    # One records message, kept current: Lisbon on the first request, Porto on the next.
    first, second = records(chat.seen[0]), records(chat.seen[1])
    assert len(first) == len(second) == 1
    assert "Lisbon" in first[0] and "Porto" in second[0] and "Lisbon" not in second[0]
    assert verdicts(store) == [("allow", "current"), ("replan", "stale_dependencies")]


async def test_a_block_is_the_result_and_the_function_never_runs(store: Store) -> None:
    moves = iter(["Porto", "Madrid"])

    def decide(messages: list[ChatMessageContent]) -> list[dict[str, Any]] | str:
        if len(results(messages)) == 2:
            return "I could not book it."
        [shown] = records(messages)
        destination = "Porto" if "Porto" in shown else "Lisbon"
        store.put(REQ, {"destination": next(moves)}, author="customer")  # it moves every time
        return book(destination)

    trip, _, history = await run(store, decide)
    assert trip.booked == []
    blocked = str(results(history.messages)[1].result)
    assert blocked.startswith("planfence blocked book_flight (stale_after_replan)")
    assert "This action will not run." in blocked
    assert verdicts(store) == [("block", "stale_after_replan"), ("replan", "stale_dependencies")]


class Broken(Middleware):
    """A gate middleware that fails (fault injection)."""

    async def on_call_tool(self, call: ToolCall, call_next: CallNext) -> Judgement:
        raise RuntimeError("injected fault")


def once(messages: list[ChatMessageContent]) -> list[dict[str, Any]] | str:
    return "Done." if results(messages) else book("Lisbon")


async def test_a_fault_in_the_gate_is_a_block(store: Store) -> None:
    trip, _, history = await run(store, once, middleware=[Broken()])
    assert trip.booked == []
    assert str(results(history.messages)[0].result).startswith("planfence blocked book_flight")


async def test_a_store_that_cannot_be_read_is_shown_and_blocks(tmp_path: Path) -> None:
    gone = open_store(f"sqlite:///{tmp_path / 'gone.db'}")
    gone.close()
    trip, chat, history = await run(gone, once)
    assert trip.booked == []
    assert "cannot be read" in records(chat.seen[0])[0]
    assert "(store_unavailable)" in str(results(history.messages)[0].result)


async def test_without_records_shown_a_gated_call_is_blocked_and_an_ungated_one_runs(
    store: Store,
) -> None:
    def decide(messages: list[ChatMessageContent]) -> list[dict[str, Any]] | str:
        if results(messages):
            return "Done."
        weather = {"name": "check_weather", "args": {"destination": "Lisbon"}}
        return [*book("Lisbon"), weather]

    trip, _, history = await run(store, decide, show=False)
    assert trip.booked == []
    said = {r.function_name: str(r.result) for r in results(history.messages)}
    assert said["check_weather"] == "weather at Lisbon: sunny"
    assert said["book_flight"].startswith("planfence blocked book_flight")


async def test_a_call_the_kernel_rejects_never_reaches_the_gate(store: Store) -> None:
    def decide(messages: list[ChatMessageContent]) -> list[dict[str, Any]] | str:
        done = results(messages)
        if not done:
            return [{"name": "book_flight", "args": {"to": "Lisbon"}}]  # not its argument
        return "Booked." if len(done) > 1 else book("Lisbon")

    trip, _, history = await run(store, decide)
    assert "Missing required argument" in str(results(history.messages)[0].result)
    assert trip.booked == ["Lisbon"]
    assert verdicts(store) == [("allow", "current")]


async def test_parallel_calls_of_one_answer_share_one_plan(store: Store) -> None:
    def decide(messages: list[ChatMessageContent]) -> list[dict[str, Any]] | str:
        return "Done." if results(messages) else book("Lisbon") + book("Lisbon")

    trip, _, _ = await run(store, decide)
    assert trip.booked == ["Lisbon", "Lisbon"]
    decisions = find_decisions_sync(store, source="gate")
    assert [d.verdict for d in decisions] == ["allow", "allow"]
    assert len({d.plan for d in decisions}) == 1


def test_install_is_idempotent(store: Store) -> None:
    fence = PlanfenceFilter(store, POLICY, keys=[REQ])
    kernel = fence.install(fence.install(Kernel()))
    assert [f for _, f in kernel.auto_function_invocation_filters] == [fence]
    fence.uninstall(kernel)
    assert kernel.auto_function_invocation_filters == []
    fence.close()


async def test_a_chat_completion_agent_shown_the_records_before_each_response(
    store: Store,
) -> None:
    """The agent copies its thread's history for each response: `show` on that history before
    each one keeps what it copies current (a change in between needs no replan)."""

    def decide(messages: list[ChatMessageContent]) -> list[dict[str, Any]] | str:
        if messages[-1].role == AuthorRole.TOOL:
            return "Booked."
        [shown] = records(messages)
        return book("Porto" if "Porto" in shown else "Lisbon")

    trip = Trip()
    fence = PlanfenceFilter(store, POLICY, keys=[REQ], agent="booker")
    kernel = fence.install(Kernel())
    kernel.add_plugin(trip, "trip")
    kernel.add_service(Chat(ai_model_id="scripted", decide=decide, seen=[]))
    settings = PromptExecutionSettings(function_choice_behavior=FunctionChoiceBehavior.Auto())
    agent = ChatCompletionAgent(
        kernel=kernel, name="booker", arguments=KernelArguments(settings=settings)
    )
    history = ChatHistory()
    thread = ChatHistoryAgentThread(chat_history=history)
    for destination in ("Lisbon", "Porto"):
        store.put(REQ, {"destination": destination}, author="customer")
        await fence.show(history)
        await agent.get_response(messages=TASK, thread=thread)
    await fence.aclose()
    assert trip.booked == ["Lisbon", "Porto"]
    assert verdicts(store) == [("allow", "current"), ("allow", "current")]


async def test_a_cloned_kernel_keeps_the_filter_and_its_gate(store: Store) -> None:
    def decide(messages: list[ChatMessageContent]) -> list[dict[str, Any]] | str:
        done = results(messages)
        if not done:
            store.put(REQ, {"destination": "Porto"}, author="customer")  # while it thinks
            return book("Lisbon")
        return "Booked." if len(done) > 1 else book("Porto")

    trip = Trip()
    fence = PlanfenceFilter(store, POLICY, keys=[REQ], agent="booker")
    kernel = fence.install(Kernel())
    kernel.add_plugin(trip, "trip")
    cloned = kernel.clone()  # as a handoff orchestration does with each agent's kernel
    assert [f for _, f in cloned.auto_function_invocation_filters] == [fence]
    history = await fence.show(ChatHistory())
    history.add_user_message(TASK)
    chat = Chat(ai_model_id="scripted", decide=decide, seen=[])
    settings = PromptExecutionSettings(function_choice_behavior=FunctionChoiceBehavior.Auto())
    await chat.get_chat_message_content(history, settings, kernel=cloned)
    await fence.aclose()
    assert trip.booked == ["Porto"]  # the stale Lisbon call was refused by the shared gate
    assert verdicts(store) == [("allow", "current"), ("replan", "stale_dependencies")]
