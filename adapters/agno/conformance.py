"""Agno harness: an `Agent` whose model is a `Model` subclass that asks the script what to do on
every call, with the `PlanfenceToolHook` as its tool hook and its instructions.

Agno opens no OpenTelemetry span of its own around a tool unless its tracing is set up, so case
(h) checks that the gate's span is inside the span the agent was run in."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from planfence.plugins.gate.checkers import CheckerFactory
from planfence.shared_memory.extras import extra_imports

from ..conformance.harness import Run, controlled
from ..conformance.world import AGENT, KEY, TASK, Script, World

with extra_imports("agno", "the Agno conformance harness"):
    from agno.agent import Agent
    from agno.models.base import Model
    from agno.models.response import ModelResponse

    from planfence.adapters.agno import PlanfenceToolHook


@dataclass
class ScriptedModel(Model):
    """A model whose every answer is the script's next step."""

    id: str = "scripted"
    script: Any = None
    told: list[str] = field(default_factory=list)

    async def ainvoke(self, messages: list[Any], *args: Any, **kwargs: Any) -> ModelResponse:
        shown = [str(m.content) for m in messages if m.role in ("system", "user") and m.content]
        last = messages[-1] if messages else None
        result = str(last.content) if last is not None and last.role == "tool" else None
        if result is not None:
            self.told.append(result)
        step = await self.script.next(shown, result)
        if step is None:
            return ModelResponse(role="assistant", content=Script.FINAL)
        call = {"name": step.tool, "arguments": json.dumps(step.args)}
        call_id = f"call-{self.script.runs}-{self.script.calls}"
        return ModelResponse(
            role="assistant", tool_calls=[{"id": call_id, "type": "function", "function": call}]
        )

    def invoke(self, *args: Any, **kwargs: Any) -> ModelResponse:
        raise NotImplementedError("the harness runs the agent with arun")

    def invoke_stream(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def ainvoke_stream(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def _parse_provider_response(self, response: Any, **kwargs: Any) -> ModelResponse:
        return response  # type: ignore[no-any-return]

    def _parse_provider_response_delta(self, response: Any) -> ModelResponse:
        return response  # type: ignore[no-any-return]


class AgnoHarness:
    name: ClassVar[str] = "agno"
    extra: ClassVar[str] = "agno"
    modules: ClassVar[Sequence[str]] = ("agno",)
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
        fence = PlanfenceToolHook(
            world.store, world.policy, keys=[KEY] if plans else [], agent=AGENT
        )
        controlled(fence.gate, checker)
        model = ScriptedModel(script=script)
        agent = Agent(
            name=AGENT,
            model=model,
            tools=list(world.tools().values()),
            tool_hooks=[fence],
            instructions=fence.instructions("Book the trip's flight."),
            telemetry=False,
        )
        try:
            for n in range(runs):
                if n:
                    script.new_run()
                await agent.arun(TASK)
        finally:
            if close:
                await fence.aclose()
        return Run(model.told)
