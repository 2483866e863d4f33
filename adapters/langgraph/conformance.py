"""LangGraph harnesses: `create_agent` with `PlanfenceAgentMiddleware`, and a hand-written graph
with a planner node reading through `PlanfenceStore` and a `PlanfenceToolNode` tool node."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

from planfence.plugins.gate.checkers import CheckerFactory
from planfence.shared_memory import StoreUnavailableError
from planfence.shared_memory.extras import extra_imports

from ..conformance.harness import Run, controlled
from ..conformance.world import AGENT, KEY, TASK, Script, World

with extra_imports("langgraph", "the LangGraph conformance harness"):
    from langchain.agents import create_agent
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import BaseTool, StructuredTool
    from langgraph.constants import END, START
    from langgraph.graph import MessagesState, StateGraph

    from planfence.adapters.langgraph import (
        PlanfenceAgentMiddleware,
        PlanfenceState,
        PlanfenceStore,
        PlanfenceToolNode,
    )


class ScriptedChatModel(BaseChatModel):
    """A chat model whose every answer is the script's next step."""

    script: Any

    @property
    def _llm_type(self) -> str:
        return "planfence-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        raise NotImplementedError("the conformance harness runs agents asynchronously")

    async def _agenerate(
        self, messages: list[BaseMessage], *args: Any, **kwargs: Any
    ) -> ChatResult:
        shown = [m.text for m in messages if not isinstance(m, AIMessage | ToolMessage)]
        last = messages[-1] if messages else None
        result = last.text if isinstance(last, ToolMessage) else None
        step = await self.script.next(shown, result)
        if step is None:
            reply = AIMessage(content=Script.FINAL)
        else:
            call = {"name": step.tool, "args": step.args, "id": f"call-{self.script.calls}"}
            reply = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])


def lc_tools(world: World) -> list[BaseTool]:
    return [
        StructuredTool.from_function(coroutine=fn, name=name, description=fn.__doc__ or name)
        for name, fn in world.tools().items()
    ]


def told(messages: Sequence[Any]) -> Run:
    return Run([m.text for m in messages if isinstance(m, ToolMessage)])


TASK_INPUT: Any = {"messages": [{"role": "user", "content": TASK}]}


class CreateAgent:
    """`create_agent(model, tools, middleware=[PlanfenceAgentMiddleware(...)])`."""

    name: ClassVar[str] = "langgraph.create_agent"
    extra: ClassVar[str] = "langgraph"
    modules: ClassVar[Sequence[str]] = ("langgraph", "langchain")
    tool_span: ClassVar[str | None] = None  # LangChain opens no OpenTelemetry spans itself

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
        keys = [KEY] if plans else []
        fence = PlanfenceAgentMiddleware(world.store, world.policy, keys=keys, agent=AGENT)
        controlled(fence.gate, checker)
        agent = create_agent(ScriptedChatModel(script=script), lc_tools(world), middleware=[fence])
        run = Run()
        try:
            for n in range(runs):
                if n:
                    script.new_run()
                state = await agent.ainvoke(TASK_INPUT)
                run.told += told(state["messages"]).told
        finally:
            if close:
                await fence.gate.aclose()
        return run


class GraphState(MessagesState, PlanfenceState):
    pass


class HandWrittenGraph:
    """A planner node that reads through `PlanfenceStore` and stamps with `PlanfenceToolNode`, and
    the fence's tool node routing a refusal back to the planner."""

    name: ClassVar[str] = "langgraph.graph"
    extra: ClassVar[str] = "langgraph"
    modules: ClassVar[Sequence[str]] = ("langgraph", "langchain")
    tool_span: ClassVar[str | None] = None

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
        model = ScriptedChatModel(script=script)
        reader = PlanfenceStore(world.store)
        fence = PlanfenceToolNode(world.store, world.policy, planner="planner", proceed="planner")
        controlled(fence.gate, checker)
        namespace, _, leaf = KEY.rpartition("/")

        async def planner(state: GraphState) -> dict[str, Any]:
            prompt: list[BaseMessage] = list(state["messages"])
            if plans:
                try:
                    item = await reader.aget(tuple(namespace.split("/")), leaf)
                    shown = f"{KEY}: {json.dumps(item.value)}" if item is not None else None
                except StoreUnavailableError as exc:  # what a planner node says instead
                    shown = f"the records cannot be read now: {exc}"
                if shown is not None:
                    prompt = [SystemMessage(shown), *prompt]
            reply = await model.ainvoke(prompt)
            update: dict[str, Any] = {"messages": [reply]}
            if plans and isinstance(reply, AIMessage) and reply.tool_calls:
                update.update(await fence.astamp(state, reader.take_reads()))
            return update

        def route(state: GraphState) -> str:
            last = state["messages"][-1]
            return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

        graph = StateGraph(GraphState)
        graph.add_node("planner", planner)
        graph.add_node("tools", fence.tool_node(lc_tools(world)), destinations=fence.destinations)
        graph.add_edge(START, "planner")
        graph.add_conditional_edges("planner", route, ["tools", END])
        compiled, run = graph.compile(), Run()
        try:
            for n in range(runs):
                if n:
                    script.new_run()
                state = await compiled.ainvoke(TASK_INPUT)
                run.told += told(state["messages"]).told
        finally:
            if close:
                await fence.gate.aclose()
        return run
