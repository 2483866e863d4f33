"""A2A harness: a real A2A server (the JSON-RPC routes, the default request handler, an in-memory
task store) whose receiving agent runs the world's tools behind `PlanfenceAgentExecutor`, and a real
A2A client in the same process (over httpx's ASGI transport) with `PlanfenceInterceptor`. The
sender is the scripted model: shown the records, it plans (`PlanStamper`) and calls the skill
the script names; the receiving agent checks the sender's plan against the shared store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from planfence.plugins.gate.checkers import CheckerFactory
from planfence.shared_memory.extras import extra_imports

from ..conformance.harness import Run, controlled
from ..conformance.world import AGENT, KEY, Script, World

with extra_imports("a2a", "the A2A conformance harness"):
    import httpx
    from a2a.client import ClientConfig, ClientFactory
    from a2a.helpers import get_message_text, new_task, new_text_part
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.server.request_handlers import DefaultRequestHandlerV2
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
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
    from starlette.applications import Starlette

    from planfence.adapters.a2a import (
        PlanfenceAgentExecutor,
        PlanfenceInterceptor,
        SenderPlans,
        skill_call,
        skill_message,
    )

URL = "http://airline.a2a.test/"
RECEIVER = "airline"


class ToolsAgent(AgentExecutor):
    """The receiving agent: runs the skill the message names with its data part, and completes
    the task with the tool's answer."""

    def __init__(self, world: World) -> None:
        self.tools = world.tools()

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None and context.task_id and context.context_id
        call = skill_call(context.message)
        assert call is not None
        await event_queue.enqueue_event(
            new_task(context.task_id, context.context_id, TaskState.TASK_STATE_WORKING)
        )
        if set(call.args) == {"destination"}:
            answer = await self.tools[call.tool](str(call.args["destination"]))
        else:  # arguments that do not fit the skill: the sender may try again
            answer = f"error: {call.tool} takes one argument, destination"
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        await updater.add_artifact([new_text_part(answer)])
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


def card(world: World) -> AgentCard:
    skills = [
        AgentSkill(id=name, name=name, description=fn.__doc__ or name, tags=["travel"])
        for name, fn in world.tools().items()
    ]
    return AgentCard(
        name=RECEIVER,
        description="Books flights and looks up the weather.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(protocol_binding="JSONRPC", url=URL, protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=False),
        default_input_modes=["application/json"],
        default_output_modes=["text/plain"],
        skills=skills,
    )


def answer_text(task: Task) -> str:
    """What the sender reads back: the refusal (status message) or the tool's answer."""
    if task.status.HasField("message") and task.status.message.parts:
        return get_message_text(task.status.message)
    return "\n".join(p.text for a in task.artifacts for p in a.parts if p.HasField("text"))


class A2AHarness:
    name: ClassVar[str] = "a2a"
    extra: ClassVar[str] = "a2a"
    modules: ClassVar[Sequence[str]] = ("a2a",)
    tool_span: ClassVar[str | None] = None  # the SDK traces its handlers, not a tool call

    async def run(
        self,
        world: World,
        script: Script,
        *,
        checker: CheckerFactory | None,
        plans: bool,
        runs: int = 1,
        close: bool = True,
    ) -> Run:
        agent_card = card(world)
        executor = PlanfenceAgentExecutor(
            ToolsAgent(world), world.store, world.policy, agent=RECEIVER
        )
        controlled(executor.gate, checker)
        handler = DefaultRequestHandlerV2(executor, InMemoryTaskStore(), agent_card)
        app = Starlette(
            routes=[*create_agent_card_routes(agent_card), *create_jsonrpc_routes(handler, "/")]
        )
        sender = SenderPlans(world.store, AGENT, keys=[KEY] if plans else [])
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=URL)
        config = ClientConfig(streaming=False, httpx_client=http)
        client = ClientFactory(config).create(
            agent_card, [PlanfenceInterceptor(sender, world.policy)]
        )
        run = Run()
        try:
            for n in range(runs):
                if n:
                    script.new_run()
                    sender.reset()  # a new request: a plan chain of its own
                await self._once(script, sender, client, run, plans)
        finally:
            await client.close()
            await http.aclose()
            if close:
                await executor.gate.aclose()
        return run

    @staticmethod
    async def _once(
        script: Script, sender: SenderPlans, client: Any, run: Run, plans: bool
    ) -> None:
        last = None
        while True:
            shown = [await sender.show()] if plans else []
            step = await script.next(shown, last)
            if step is None:
                return
            if plans:
                await sender.stamp()
            request = SendMessageRequest(message=skill_message(step.tool, step.args))
            async for reply in client.send_message(request):
                last = answer_text(reply.task)
            run.told.append(last or "")
