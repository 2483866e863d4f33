"""LlamaIndex harness: a `FunctionAgent` whose tools come from `PlanfenceMemoryBlock.tools` and
whose run's `Memory` holds the block, driven by LlamaIndex's own `MockFunctionCallingLLM` with a
response generator that asks the script on every model call."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from typing import Any, ClassVar

from planfence.plugins.gate.checkers import CheckerFactory
from planfence.shared_memory.extras import extra_imports

from ..conformance.harness import Run, controlled
from ..conformance.world import AGENT, KEY, TASK, Script, World

with extra_imports("llamaindex", "the LlamaIndex conformance harness"):
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.base.llms.types import ToolCallBlock
    from llama_index.core.llms import ChatMessage, MessageRole
    from llama_index.core.llms.mock import MockFunctionCallingLLM
    from llama_index.core.memory import Memory
    from llama_index.core.tools import FunctionTool
    from sqlalchemy.ext.asyncio import create_async_engine

    from planfence.adapters.llamaindex import PlanfenceMemoryBlock


def model(script: Script, told: list[str]) -> MockFunctionCallingLLM:
    async def answer(
        messages: Sequence[ChatMessage], **kwargs: Any
    ) -> AsyncGenerator[ChatMessage, None]:
        shown = [
            m.content or ""
            for m in messages
            if m.role in (MessageRole.SYSTEM, MessageRole.USER) and m.content
        ]
        last = messages[-1] if messages else None
        result = last.content or "" if last is not None and last.role == MessageRole.TOOL else None
        if result is not None:
            told.append(result)
        step = await script.next(shown, result)
        if step is None:
            yield ChatMessage(role=MessageRole.ASSISTANT, content=Script.FINAL)
            return
        call = ToolCallBlock(
            tool_call_id=f"call-{script.calls}", tool_name=step.tool, tool_kwargs=step.args
        )
        yield ChatMessage(role=MessageRole.ASSISTANT, blocks=[call])

    return MockFunctionCallingLLM(response_generator=answer)


class LlamaIndexHarness:
    name: ClassVar[str] = "llamaindex"
    extra: ClassVar[str] = "llamaindex"
    modules: ClassVar[Sequence[str]] = ("llama_index.core",)
    tool_span: ClassVar[str | None] = None  # LlamaIndex traces to its own dispatcher, not OTel

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
        fence = PlanfenceMemoryBlock(
            world.store, world.policy, keys=[KEY] if plans else [], agent=AGENT
        )
        controlled(fence.gate, checker)
        told: list[str] = []
        tools = [FunctionTool.from_defaults(fn, name=name) for name, fn in world.tools().items()]
        agent = FunctionAgent(
            name=AGENT,
            tools=fence.tools(tools),
            llm=model(script, told),
            system_prompt="Book the trip's flight.",
        )
        try:
            for n in range(runs):
                if n:
                    script.new_run()
                chats = create_async_engine("sqlite+aiosqlite://")  # Memory has no close
                try:
                    memory = Memory.from_defaults(memory_blocks=[fence], async_engine=chats)
                    await agent.run(user_msg=TASK, memory=memory)
                finally:
                    await chats.dispose()
        finally:
            if close:
                await fence.aclose()
        return Run(told)
