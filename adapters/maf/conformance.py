"""Microsoft Agent Framework harness: an `Agent` over a scripted chat client (the framework's
own client layers: function invocation, chat middleware, telemetry), the world's tools as its
functions, and one `PlanfenceFunctionMiddleware` as the agent's context provider and function
middleware."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from planfence.plugins.gate.checkers import CheckerFactory
from planfence.shared_memory.extras import extra_imports

from ..conformance.harness import Run, controlled
from ..conformance.world import AGENT, KEY, TASK, Script, World

with extra_imports("maf", "the Microsoft Agent Framework conformance harness"):
    from agent_framework import (
        Agent,
        BaseChatClient,
        ChatMiddlewareLayer,
        ChatResponse,
        Content,
        FunctionInvocationLayer,
        FunctionTool,
        Message,
    )
    from agent_framework.observability import ChatTelemetryLayer

    from planfence.adapters.maf import PlanfenceFunctionMiddleware


def _text(value: Any) -> str:
    """A function result as the model reads it (text items joined)."""
    if isinstance(value, list):
        return "\n".join(_text(v) for v in value)
    if isinstance(value, Content):
        return value.text if value.type == "text" and value.text else _text(value.result)
    return "" if value is None else str(value)


def _seen(messages: Sequence[Message], instructions: Any) -> tuple[list[str], str | None]:
    """What the model is shown (instructions, user and system messages) and the latest tool
    result."""
    shown = [str(instructions)] if instructions else []
    shown += [m.text for m in messages if m.role in ("system", "user") and m.text]
    last = None
    if messages and messages[-1].role == "tool":
        last = _text([c.result for c in messages[-1].contents if c.type == "function_result"])
    return shown, last


class ScriptedClient(
    FunctionInvocationLayer[Any],
    ChatMiddlewareLayer[Any],
    ChatTelemetryLayer[Any],
    BaseChatClient[Any],
):
    """A chat client whose every answer comes from the script."""

    def __init__(self, script: Script) -> None:
        super().__init__()
        self.script = script

    def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: Mapping[str, Any], **_: Any
    ) -> Any:
        return self._answer(messages, options)

    async def _answer(self, messages: Sequence[Message], options: Mapping[str, Any]) -> Any:
        step = await self.script.next(*_seen(messages, options.get("instructions")))
        if step is None:
            return ChatResponse(messages=[Message(role="assistant", contents=[Script.FINAL])])
        call = Content.from_function_call(
            call_id=f"call-{self.script.calls}", name=step.tool, arguments=json.dumps(step.args)
        )
        return ChatResponse(messages=[Message(role="assistant", contents=[call])])


class MAFHarness:
    name: ClassVar[str] = "maf"
    extra: ClassVar[str] = "maf"
    modules: ClassVar[Sequence[str]] = ("agent_framework",)
    # The framework's `execute_tool` span encloses the function alone: function middleware runs
    # before it opens, so the gate's span is its sibling in the agent's span, not its child.
    tool_span: ClassVar[str | None] = "execute_tool"
    tool_span_wraps_gate: ClassVar[bool] = False

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
        fence = PlanfenceFunctionMiddleware(
            world.store, world.policy, keys=[KEY] if plans else [], agent=AGENT
        )
        controlled(fence.gate, checker)
        tools = [
            FunctionTool(name=name, description=fn.__doc__ or name, func=fn)
            for name, fn in world.tools().items()
        ]
        agent = Agent(
            client=ScriptedClient(script),
            tools=tools,
            middleware=[fence],
            context_providers=[fence] if plans else [],
        )
        told: list[str] = []
        try:
            for n in range(runs):
                if n:
                    script.new_run()
                response = await agent.run(TASK)
                told += [
                    _text(c.result)
                    for m in response.messages
                    if m.role == "tool"
                    for c in m.contents
                    if c.type == "function_result"
                ]
        finally:
            if close:
                await fence.gate.aclose()
        return Run(told)
