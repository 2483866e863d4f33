"""Strands Agents harness: an `Agent` with the `PlanfenceHookProvider` hooks, on a `Model`
subclass that asks the script what to do on every call and streams the answer as Strands'
stream events.

Strands opens its tool span (`execute_tool <name>`) around the tool's function only, after the
`BeforeToolCallEvent` hooks ran: the gate's span is its sibling under the event loop cycle's
span, just before it (case h)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Sequence
from typing import Any, ClassVar

from planfence.plugins.gate.checkers import CheckerFactory
from planfence.shared_memory.extras import extra_imports

from ..conformance.harness import Run, controlled
from ..conformance.world import AGENT, KEY, TASK, Script, World

with extra_imports("strands", "the Strands Agents conformance harness"):
    from strands import Agent, tool
    from strands.models import Model

    from planfence.adapters.strands import PlanfenceHookProvider


def _text(blocks: Any) -> str:
    return "\n".join(str(b["text"]) for b in blocks or [] if isinstance(b, dict) and "text" in b)


def _result(messages: Sequence[Any]) -> str | None:
    """The text of the latest tool result the model reads, if its last message holds one."""
    last = messages[-1] if messages else None
    if last is None or last.get("role") != "user":
        return None
    results = [c["toolResult"] for c in last.get("content", []) if "toolResult" in c]
    return _text(results[-1].get("content")) if results else None


class ScriptedModel(Model):
    """A model whose every answer is the script's next step, streamed as Strands' events."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.told: list[str] = []

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    def structured_output(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the scripted model answers with text or tool uses only")

    async def stream(
        self,
        messages: Any,
        tool_specs: Any = None,
        system_prompt: str | None = None,
        **kwargs: Any,
    ) -> AsyncGenerator[Any, None]:
        shown = [system_prompt] if system_prompt else []
        shown += [
            _text(m.get("content"))
            for m in messages
            if m.get("role") == "user" and _text(m.get("content"))
        ]
        result = _result(messages)
        if result is not None:
            self.told.append(result)
        step = await self.script.next(shown, result)
        yield {"messageStart": {"role": "assistant"}}
        if step is None:
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": Script.FINAL}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}
            return
        use = {"toolUseId": f"call-{self.script.runs}-{self.script.calls}", "name": step.tool}
        yield {"contentBlockStart": {"start": {"toolUse": use}}}
        yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(step.args)}}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use"}}


class StrandsHarness:
    name: ClassVar[str] = "strands"
    extra: ClassVar[str] = "strands"
    modules: ClassVar[Sequence[str]] = ("strands",)
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
        fence = PlanfenceHookProvider(
            world.store, world.policy, keys=[KEY] if plans else [], agent=AGENT
        )
        controlled(fence.gate, checker)
        model = ScriptedModel(script)
        tools: list[Any] = [tool(name=name)(fn) for name, fn in world.tools().items()]
        agent = Agent(
            model=model,
            tools=tools,
            hooks=[fence],
            system_prompt="Book the trip's flight.",
            callback_handler=None,
            name=AGENT,
        )
        try:
            for n in range(runs):
                if n:
                    script.new_run()
                await agent.invoke_async(TASK)
        finally:
            if close:
                await fence.aclose()
        return Run(model.told)
