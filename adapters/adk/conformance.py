"""Google ADK harness: an `LlmAgent` on a scripted `BaseLlm`, run by an `InMemoryRunner` with the
`PlanfencePlugin`."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Sequence
from typing import Any, ClassVar

from planfence.plugins.gate.checkers import CheckerFactory
from planfence.shared_memory.extras import extra_imports

from ..conformance.harness import Run, controlled
from ..conformance.world import AGENT, KEY, TASK, Script, World

with extra_imports("adk", "the Google ADK conformance harness"):
    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.models import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.runners import InMemoryRunner
    from google.genai import types
    from pydantic import Field

    from planfence.adapters.adk import PlanfencePlugin


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = getattr(content, "parts", None) or []
    return "\n".join(p.text for p in parts if getattr(p, "text", None))


def _answer(response: Any) -> str:
    """A tool's answer as the model reads it (ADK wraps a plain result as {"result": ...})."""
    if isinstance(response, dict) and set(response) == {"result"}:
        return str(response["result"])
    return json.dumps(response)


class ScriptedLlm(BaseLlm):
    """A model whose every answer is the script's next step."""

    script: Any = None
    told: list[str] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        config = llm_request.config
        shown = [_text(config.system_instruction)] if config and config.system_instruction else []
        contents = llm_request.contents or []
        shown += [_text(c) for c in contents if c.role == "user" and _text(c)]
        last = contents[-1].parts if contents and contents[-1].parts else []
        answers = [p.function_response.response for p in last if p.function_response]
        result = _answer(answers[-1]) if answers else None
        if result is not None:
            self.told.append(result)
        step = await self.script.next(shown, result)
        if step is None:
            part = types.Part(text=Script.FINAL)
        else:
            call = types.FunctionCall(
                name=step.tool, args=step.args, id=f"call-{self.script.calls}"
            )
            part = types.Part(function_call=call)
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


class ADKHarness:
    name: ClassVar[str] = "adk"
    extra: ClassVar[str] = "adk"
    modules: ClassVar[Sequence[str]] = ("google.adk",)
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
        plugin = PlanfencePlugin(
            world.store, world.policy, keys=[KEY] if plans else [], agent=AGENT
        )
        controlled(plugin.gate, checker)
        llm = ScriptedLlm(model="scripted", script=script, told=[])
        agent = LlmAgent(
            name=AGENT,
            model=llm,
            instruction="Book the trip's flight.",
            tools=list(world.tools().values()),
        )
        runner = InMemoryRunner(app=App(name="conformance", root_agent=agent, plugins=[plugin]))
        session = await runner.session_service.create_session(app_name="conformance", user_id="u")
        message = types.Content(role="user", parts=[types.Part(text=TASK)])
        try:
            for n in range(runs):  # each run a new invocation in the same session
                if n:
                    script.new_run()
                async for _ in runner.run_async(
                    user_id="u", session_id=session.id, new_message=message
                ):
                    pass
        finally:
            if close:
                await runner.close()  # closes the plugin too
        return Run(list(llm.told))
