"""Scripted chat models and a trip-booking setup for the LangGraph adapter tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import tool
from pydantic import Field

from planfence.plugins.gate import Policy
from planfence.shared_memory import AsyncStore, Store, StoreBridge

REQ = "trip/42/requirements"
POLICY = Policy().declare("book_flight", depends_on=[REQ])


class ScriptedChatModel(FakeMessagesListChatModel):
    """A fake chat model that supports `bind_tools`; `meanwhile[i]` runs before its i-th answer,
    as if another agent committed while this one was thinking."""

    meanwhile: dict[int, Callable[[], None]] = Field(default_factory=dict)
    prompts: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        hook = self.meanwhile.pop(self.i, None)
        if hook is not None:
            hook()
        self.prompts.append(list(messages))
        return super()._generate(messages, stop, run_manager, **kwargs)


def book(destination: str, n: int) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[{"name": "book_flight", "args": {"destination": destination}, "id": f"c{n}"}],
    )


class Trip:
    def __init__(self, store: AsyncStore | Store) -> None:
        self.bridge = StoreBridge(store)
        self.booked: list[str] = []

        @tool
        def book_flight(destination: str) -> str:
            """Book the flight for the trip."""
            self.booked.append(destination)
            return f"booked a flight to {destination}"

        self.tool = book_flight

    def put(self, destination: str) -> str:
        async def run(store: AsyncStore) -> str:
            if await store.owner(REQ) is None:
                await store.own(REQ, "customer")
            record = await store.put(REQ, {"destination": destination}, author="customer")
            return record.id

        return self.bridge.call(run)

    def revise(self, destination: str) -> Callable[[], None]:
        return lambda: self.put(destination) and None

    def head(self) -> str | None:
        async def run(store: AsyncStore) -> str | None:
            return await store.head(REQ)

        return self.bridge.call(run)

    def model(
        self, answers: Sequence[AIMessage | str], revisions: dict[int, str]
    ) -> ScriptedChatModel:
        responses = [a if isinstance(a, AIMessage) else AIMessage(content=a) for a in answers]
        return ScriptedChatModel(
            responses=responses,
            meanwhile={i: self.revise(d) for i, d in revisions.items()},
        )
