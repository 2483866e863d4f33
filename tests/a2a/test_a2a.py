"""A2A with a real server and client in one process: the A2A page's snippet runs as written, the
receiving agent checks the sender's plan itself (a sender without the interceptor, or with a
plan that does not exist, is refused before the agent acts), a sender-side gate answers a stale
plan without sending, and over a real socket the receiver's check joins the sender's trace."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
from a2a.client import ClientConfig, ClientFactory
from a2a.helpers import new_task, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandlerV2
from a2a.server.routes import create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    SendMessageRequest,
    Task,
    TaskState,
)
from docpages import block
from google.protobuf import json_format
from starlette.applications import Starlette

from planfence.adapters.a2a import (
    PlanfenceAgentExecutor,
    PlanfenceInterceptor,
    SenderPlans,
    skill_call,
    skill_message,
)
from planfence.plugins.gate import (
    GateMiddleware,
    PlanStamper,
    Policy,
    find_decisions_sync,
    parse_payload,
)
from planfence.plugins.gate.reads import reads_of
from planfence.shared_memory import Store, open_async_store, open_store

PAGE = "docs/frameworks/a2a.md"
REQ = "trip/42/requirements"
URL = "http://airline.test/"
POLICY = Policy().declare("book_flight", depends_on=[REQ])
CARD = AgentCard(
    name="airline",
    description="Books flights.",
    version="1.0.0",
    supported_interfaces=[
        AgentInterface(protocol_binding="JSONRPC", url=URL, protocol_version="1.0")
    ],
    capabilities=AgentCapabilities(streaming=False),
    default_input_modes=["application/json"],
    default_output_modes=["text/plain"],
    skills=[AgentSkill(id="book_flight", name="book_flight", description="Book.", tags=["travel"])],
)


class Airline(AgentExecutor):
    """Books the destination it is sent and keeps what it booked."""

    def __init__(self) -> None:
        self.booked: list[str] = []

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None and context.task_id and context.context_id
        call = skill_call(context.message)
        assert call is not None
        self.booked.append(str(call.args["destination"]))
        await event_queue.enqueue_event(
            new_task(context.task_id, context.context_id, TaskState.TASK_STATE_WORKING)
        )
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.add_artifact([new_text_part("booked")])
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


def test_a2a_page_snippet_runs_as_written(capsys: Any, tmp_path: Path) -> None:
    """Nothing is given to the snippet: its agent, card, sender and receiver are its own."""
    # The snippet closes its store: on a file, what it wrote can be read back after.
    url = f"sqlite:///{tmp_path / 'team.db'}"
    code = block(PAGE, "Add planfence to agents that talk A2A").replace(
        'open_store("memory://")', f"open_store({url!r})"
    )
    exec(compile(code, PAGE, "exec"), {"__name__": "snippet"})
    assert capsys.readouterr().out.strip() == "TASK_STATE_COMPLETED"
    store = open_store(url)
    try:
        [allow] = find_decisions_sync(store, source="gate")
        assert (allow.verdict, allow.reason) == ("allow", "current")
        assert store.get(allow.plan).parents == (store.head(REQ),)
    finally:
        store.close()


def shared() -> Store:
    store = open_store("memory://")
    store.own(REQ, "customer")
    store.put(REQ, {"destination": "Lisbon"}, author="customer")
    return store


async def send(airline: Airline, store: Store, message: Any, interceptors: list[Any]) -> Task:
    fenced = PlanfenceAgentExecutor(airline, store, POLICY, agent="airline")
    handler = DefaultRequestHandlerV2(fenced, InMemoryTaskStore(), CARD)
    app = Starlette(routes=create_jsonrpc_routes(handler, "/"))
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=URL)
    client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(
        CARD, interceptors
    )
    try:
        [reply] = [r async for r in client.send_message(SendMessageRequest(message=message))]
        return reply.task
    finally:
        await client.close()
        await http.aclose()
        await fenced.gate.aclose()


def refusal(task: Task) -> Any:
    meta = json_format.MessageToDict(task.status.message.metadata)
    return parse_payload(meta["dev.planfence/refusal"])


def test_the_receiver_checks_the_plan_a_sender_carries_without_the_interceptor() -> None:
    store, airline = shared(), Airline()
    try:
        bare = skill_message("book_flight", {"destination": "Lisbon"})
        task = asyncio.run(send(airline, store, bare, []))
        assert task.status.state == TaskState.TASK_STATE_FAILED
        assert refusal(task).reason == "missing_plan"
        forged = skill_message("book_flight", {"destination": "Lisbon"}, plan="0" * 64)
        task = asyncio.run(send(airline, store, forged, []))
        assert task.status.state == TaskState.TASK_STATE_FAILED
        assert refusal(task).verdict == "block"
        assert airline.booked == []
    finally:
        store.close()


def test_a_stale_plan_is_rejected_by_the_receiver_and_by_a_sender_side_gate() -> None:
    store, airline = shared(), Airline()
    try:
        planner = PlanStamper(store, "booker")
        planner.bridge.run(planner.stamp, reads_of(planner.bridge.run(planner.current, [REQ])))
        store.put(REQ, {"destination": "Porto"}, author="customer")  # after the plan
        call = skill_message("book_flight", {"destination": "Lisbon"})
        task = asyncio.run(send(airline, store, call, [PlanfenceInterceptor(planner, POLICY)]))
        assert task.status.state == TaskState.TASK_STATE_REJECTED  # replan, once
        assert refusal(task).stale_keys == (REQ,)
        assert "Porto" in task.status.message.parts[0].text
        # With a gate of its own, the sender refuses before anything is sent.
        gate = GateMiddleware(store, POLICY, agent="booker")
        call = skill_message("book_flight", {"destination": "Lisbon"})
        interceptor = PlanfenceInterceptor(planner, POLICY, gate=gate)
        task = asyncio.run(send(airline, store, call, [interceptor]))
        assert task.status.state == TaskState.TASK_STATE_REJECTED
        assert airline.booked == []
        assert [d.verdict for d in find_decisions_sync(store, source="gate")] == [
            "replan",
            "replan",
        ]
    finally:
        store.close()


async def test_a_sender_whose_store_is_down_refuses_the_call_itself(tmp_path: Path) -> None:
    """Not an exception on the sender's side: its model is told the records cannot be read,
    and the skill call is answered as a failed task, store_unavailable, without sending."""
    down = await open_async_store(f"sqlite:///{tmp_path / 'sender.db'}")
    await down.aclose()
    store, airline = shared(), Airline()
    try:
        sender = SenderPlans(down, "booker", keys=[REQ])
        assert "cannot be read" in await sender.show()
        await sender.stamp()
        call = skill_message("book_flight", {"destination": "Lisbon"})
        task = await send(airline, store, call, [PlanfenceInterceptor(sender, POLICY)])
        assert task.status.state == TaskState.TASK_STATE_FAILED
        assert (refusal(task).verdict, refusal(task).reason) == ("block", "store_unavailable")
        assert airline.booked == []
        assert find_decisions_sync(store, source="gate") == []  # nothing reached the receiver
    finally:
        store.close()


async def test_over_a_real_socket_the_receivers_check_joins_the_senders_trace() -> None:
    import uvicorn

    from planfence.adapters.conformance import tracing

    store, airline = shared(), Airline()
    fenced = PlanfenceAgentExecutor(airline, store, POLICY, agent="airline")
    handler = DefaultRequestHandlerV2(fenced, InMemoryTaskStore(), CARD)
    app = Starlette(routes=create_jsonrpc_routes(handler, "/"))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
    serving = asyncio.create_task(server.serve())
    try:
        for _ in range(1000):  # uvicorn says when it listens only by this flag
            if server.started:
                break
            await asyncio.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        card = AgentCard()
        card.CopyFrom(CARD)
        card.supported_interfaces[0].url = f"http://127.0.0.1:{port}/"
        planner = PlanStamper(store, "booker")
        await planner.stamp(reads_of(await planner.current([REQ])))
        client = ClientFactory(ClientConfig(streaming=False)).create(
            card, [PlanfenceInterceptor(planner, POLICY)]
        )
        call = skill_message("book_flight", {"destination": "Lisbon"})
        with tracing.capture() as spans:
            [reply] = [r async for r in client.send_message(SendMessageRequest(message=call))]
        await client.close()
        assert reply.task.status.state == TaskState.TASK_STATE_COMPLETED
        [check] = [s for s in spans.finished() if s.name == "planfence.check book_flight"]
        assert check.context.trace_id == spans.root.context.trace_id
        assert spans.under_root(check)
    finally:
        server.should_exit = True
        await serving
        await fenced.gate.aclose()
        store.close()
