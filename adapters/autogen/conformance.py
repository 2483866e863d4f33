"""AutoGen AgentChat harness: a `PlanningAgent` shown the records by `SharedMemory`, a
`FencedAgent` whose `PlanfenceWorkbench` gates the tools, in a round-robin team."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar

from planfence.plugins.gate.checkers import CheckerFactory
from planfence.shared_memory.extras import extra_imports

from ..conformance.harness import Run, controlled
from ..conformance.world import AGENT, KEY, TASK, Script, World

with extra_imports("autogen", "the AutoGen conformance harness"):
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.messages import ToolCallExecutionEvent
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_core import FunctionCall
    from autogen_core.models import (
        AssistantMessage,
        CreateResult,
        FunctionExecutionResultMessage,
        LLMMessage,
        ModelInfo,
        RequestUsage,
    )
    from autogen_core.tools import FunctionTool, StaticWorkbench
    from autogen_ext.models.replay import ReplayChatCompletionClient

    from planfence.adapters.autogen import (
        FencedAgent,
        PlanfenceTermination,
        PlanfenceWorkbench,
        PlanningAgent,
        SharedMemory,
    )

MODEL_INFO = ModelInfo(
    vision=False,
    function_calling=True,
    json_output=False,
    family="unknown",
    structured_output=False,
    multiple_system_messages=True,
)
Answer = Callable[[Sequence[LLMMessage]], Awaitable[CreateResult]]


class ScriptedClient(ReplayChatCompletionClient):
    """A model client whose every answer comes from `answer(messages)`."""

    def __init__(self, answer: Answer) -> None:
        super().__init__([], model_info=MODEL_INFO)
        self.answer = answer

    async def create(self, messages: Sequence[LLMMessage], *args: Any, **kwargs: Any) -> Any:
        return await self.answer(messages)


def _texts(messages: Sequence[LLMMessage]) -> tuple[list[str], str | None]:
    """What the model is shown (not its own calls), and the latest tool result."""
    shown = [
        m.content
        for m in messages
        if not isinstance(m, AssistantMessage | FunctionExecutionResultMessage)
        and isinstance(m.content, str)
    ]
    last = messages[-1] if messages else None
    result = None
    if isinstance(last, FunctionExecutionResultMessage) and last.content:
        result = last.content[-1].content
    return shown, result


def _result(content: str | list[FunctionCall]) -> CreateResult:
    return CreateResult(
        finish_reason="function_calls" if isinstance(content, list) else "stop",
        content=content,
        usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
        cached=False,
    )


def executor_client(script: Script) -> ScriptedClient:
    async def answer(messages: Sequence[LLMMessage]) -> CreateResult:
        shown, result = _texts(messages)
        step = await script.next(shown, result)
        if step is None:
            return _result(Script.FINAL)
        call = FunctionCall(
            id=f"call-{script.calls}", name=step.tool, arguments=json.dumps(step.args)
        )
        return _result([call])

    return ScriptedClient(answer)


def planner_client() -> ScriptedClient:
    async def answer(messages: Sequence[LLMMessage]) -> CreateResult:
        shown, result = _texts(messages)
        destination = Script.destination(shown, result)
        return _result(f'Plan: book the flight, {{"destination": "{destination}"}}')

    return ScriptedClient(answer)


class AutoGenHarness:
    name: ClassVar[str] = "autogen"
    extra: ClassVar[str] = "autogen"
    modules: ClassVar[Sequence[str]] = ("autogen_agentchat", "autogen_ext")
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
        tools: list[Any] = [
            FunctionTool(fn, description=fn.__doc__ or name, name=name)
            for name, fn in world.tools().items()
        ]
        workbench = PlanfenceWorkbench(
            StaticWorkbench(tools),
            store=world.store,
            policy=world.policy,
            agent=AGENT,
        )
        controlled(workbench.gate, checker)
        executor = FencedAgent("executor", executor_client(script), workbench=workbench)
        team = None
        if plans:
            planner = PlanningAgent(
                "planner",
                planner_client(),
                memory=[SharedMemory(world.store, keys=[KEY])],
                system_message="Plan the booking from the current requirements.",
            )
            team = RoundRobinGroupChat(
                [planner, executor],
                termination_condition=PlanfenceTermination() | MaxMessageTermination(12),
            )
        told: list[str] = []
        try:
            for n in range(runs):  # the same team, asked again
                if n:
                    script.new_run()
                result = await (team or executor).run(task=TASK)
                told += [
                    str(r.content)
                    for m in result.messages
                    if isinstance(m, ToolCallExecutionEvent)
                    for r in m.content
                ]
        finally:
            if close:
                await workbench.gate.aclose()
        return Run(told)
