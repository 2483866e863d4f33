"""OpenAI Agents SDK harness: an `Agent` whose instructions and tools come from
`PlanfenceGuardrail`, run by `Runner` on the SDK's own `ScriptedModel` whose every step asks the
script."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar

from planfence.plugins.gate.checkers import CheckerFactory
from planfence.shared_memory.extras import extra_imports

from ..conformance.harness import Run, controlled
from ..conformance.world import AGENT, KEY, TASK, Script, World

with extra_imports("openai-agents", "the OpenAI Agents SDK conformance harness"):
    from agents import Agent, RunConfig, Runner, ToolInputGuardrailTripwireTriggered
    from agents.testing import ModelStep, ScriptedModel
    from agents.testing.model import ModelCall
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    from planfence.adapters.openai_agents import PlanfenceGuardrail


def _texts(call: ModelCall) -> tuple[list[str], str | None]:
    items = call.input if isinstance(call.input, list) else [call.input]
    shown = [call.system_instructions] if call.system_instructions else []
    shown += [str(i.get("content")) for i in items if isinstance(i, dict) and i.get("role")]
    last = items[-1] if items else None
    result = None
    if isinstance(last, dict) and last.get("type") == "function_call_output":
        result = str(last.get("output"))
    return shown, result


def model(script: Script, told: list[str]) -> ScriptedModel:
    async def respond(call: ModelCall) -> Any:
        shown, result = _texts(call)
        if result is not None:
            told.append(result)
        step = await script.next(shown, result)
        if step is None:
            text = ResponseOutputText(type="output_text", text=Script.FINAL, annotations=[])
            return [
                ResponseOutputMessage(
                    id="msg", type="message", role="assistant", status="completed", content=[text]
                )
            ]
        n = script.calls
        return [
            ResponseFunctionToolCall(
                type="function_call",
                id=f"fc-{n}",
                call_id=f"call-{n}",
                name=step.tool,
                arguments=json.dumps(step.args),
            )
        ]

    return ScriptedModel([ModelStep.respond(respond) for _ in range(script.max_calls + 2)])


class OpenAIAgentsHarness:
    name: ClassVar[str] = "openai_agents"
    extra: ClassVar[str] = "openai-agents"
    modules: ClassVar[Sequence[str]] = ("agents",)
    tool_span: ClassVar[str | None] = None  # the SDK traces to its own processors, not OTel

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
        fence = PlanfenceGuardrail(
            world.store, world.policy, keys=[KEY] if plans else [], agent=AGENT
        )
        controlled(fence.gate, checker)
        told: list[str] = []
        agent = Agent(
            name=AGENT,
            model=model(script, told),
            instructions=fence.instructions("Book the trip's flight."),
            tools=[fence.tool(fn, name_override=name) for name, fn in world.tools().items()],
        )
        try:
            for n in range(runs):
                if n:
                    script.new_run()
                try:
                    await Runner.run(agent, TASK, run_config=RunConfig(tracing_disabled=True))
                except ToolInputGuardrailTripwireTriggered as stop:  # a block ends the run
                    told.append(json.dumps(stop.output.output_info))
        finally:
            if close:
                await fence.aclose()
        return Run(told)
