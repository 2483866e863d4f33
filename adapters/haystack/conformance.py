"""Haystack harness: an `Agent` with `PlanfenceHook`'s hooks and tools, run with `run_async` on a
scripted chat generator component that asks the script on every model call."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, ClassVar

from planfence.plugins.gate.checkers import CheckerFactory
from planfence.shared_memory.extras import extra_imports

from ..conformance.harness import Run, controlled
from ..conformance.world import AGENT, KEY, TASK, Script, World

# The suite runs offline: Haystack's usage telemetry (on unless this says otherwise) stays off.
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

with extra_imports("haystack", "the Haystack conformance harness"):
    from haystack import component
    from haystack.components.agents import Agent
    from haystack.dataclasses import ChatMessage, ChatRole, ToolCall
    from haystack.tools.tool import Tool

    from planfence.adapters.haystack import PlanfenceHook


@component
class ScriptedChatGenerator:
    """A chat generator whose every reply is the script's next step."""

    def __init__(self, script: Script, told: list[str]) -> None:
        self.script, self.told = script, told

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage], tools: Any = None) -> dict[str, Any]:
        raise NotImplementedError("the harness runs the agent with run_async")

    @component.output_types(replies=list[ChatMessage])
    async def run_async(self, messages: list[ChatMessage], tools: Any = None) -> dict[str, Any]:
        shown = [
            m.text or "" for m in messages if m.is_from(ChatRole.SYSTEM) or m.is_from(ChatRole.USER)
        ]
        last = messages[-1] if messages else None
        result = None
        if last is not None and last.is_from(ChatRole.TOOL) and last.tool_call_result:
            result = str(last.tool_call_result.result)
            self.told.append(result)
        step = await self.script.next(shown, result)
        if step is None:
            return {"replies": [ChatMessage.from_assistant(Script.FINAL)]}
        call = ToolCall(tool_name=step.tool, arguments=step.args, id=f"call-{self.script.calls}")
        return {"replies": [ChatMessage.from_assistant(tool_calls=[call])]}


class HaystackHarness:
    name: ClassVar[str] = "haystack"
    extra: ClassVar[str] = "haystack"
    modules: ClassVar[Sequence[str]] = ("haystack",)
    tool_span: ClassVar[str | None] = None  # Haystack traces only through a tracer the user enables

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
        fence = PlanfenceHook(world.store, world.policy, keys=[KEY] if plans else [], agent=AGENT)
        controlled(fence.gate, checker)
        told: list[str] = []
        tools = [
            Tool(
                name=name,
                description=f"{name} for the trip",
                parameters={
                    "type": "object",
                    "properties": {"destination": {"type": "string"}},
                    "required": ["destination"],
                },
                async_function=fn,
            )
            for name, fn in world.tools().items()
        ]
        agent = Agent(
            chat_generator=ScriptedChatGenerator(script, told),
            tools=fence.tools(tools),
            system_prompt="Book the trip's flight.",
            hooks=fence.hooks(),
        )
        try:
            for n in range(runs):
                if n:
                    script.new_run()
                await agent.run_async(messages=[ChatMessage.from_user(TASK)])
        finally:
            if close:
                await fence.aclose()
        return Run(told)
