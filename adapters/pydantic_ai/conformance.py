"""PydanticAI harness: an `Agent` with the `PlanfenceCapability` capability and a `FunctionModel`
that asks the script what to do on every request."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from planfence.plugins.gate.checkers import CheckerFactory
from planfence.shared_memory.extras import extra_imports

from ..conformance.harness import Run, controlled
from ..conformance.world import AGENT, KEY, TASK, Script, World

with extra_imports("pydantic-ai", "the PydanticAI conformance harness"):
    from pydantic_ai import Agent, Tool
    from pydantic_ai.capabilities import Instrumentation
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        RetryPromptPart,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from planfence.adapters.pydantic_ai import PlanfenceCapability


def _result(part: Any) -> str | None:
    if isinstance(part, ToolReturnPart):
        return part.model_response_str()
    if isinstance(part, RetryPromptPart):
        return part.content if isinstance(part.content, str) else str(part.content)
    return None


def model(script: Script, told: list[str]) -> FunctionModel:
    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        shown = [info.instructions] if info.instructions else []
        shown += [
            str(p.content)
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, UserPromptPart)
        ]
        last = messages[-1] if messages else None
        results = [_result(p) for p in last.parts] if isinstance(last, ModelRequest) else []
        result = next((r for r in reversed(results) if r is not None), None)
        if result is not None:
            told.append(result)
        step = await script.next(shown, result)
        if step is None:
            return ModelResponse(parts=[TextPart(Script.FINAL)])
        call_id = f"call-{script.calls}"
        return ModelResponse(parts=[ToolCallPart(step.tool, step.args, tool_call_id=call_id)])

    return FunctionModel(answer)


class PydanticAIHarness:
    name: ClassVar[str] = "pydantic_ai"
    extra: ClassVar[str] = "pydantic-ai"
    modules: ClassVar[Sequence[str]] = ("pydantic_ai",)
    tool_span: ClassVar[str | None] = "execute_tool"

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
        fence = PlanfenceCapability(
            world.store, world.policy, keys=[KEY] if plans else [], agent=AGENT
        )
        controlled(fence.gate, checker)
        tools = [Tool(fn, name=name) for name, fn in world.tools().items()]
        told: list[str] = []
        # The framework's own tracing, so that its tool span exists (case h).
        traced = [Instrumentation(), fence]
        agent = Agent(model(script, told), tools=tools, capabilities=traced)
        try:
            for n in range(runs):
                if n:
                    script.new_run()
                await agent.run(TASK)
        finally:
            if close:
                await fence.aclose()
        return Run(told)
