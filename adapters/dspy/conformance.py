"""DSPy harness: a `PlanfenceReAct` run by `acall` on a `dspy.LM` whose custom engine asks the
script what to do on every step of the loop (in DSPy's chat format), and answers the final
extraction itself."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, ClassVar

from planfence.plugins.gate.checkers import CheckerFactory
from planfence.shared_memory.extras import extra_imports

from ..conformance.harness import Run, controlled
from ..conformance.world import AGENT, KEY, TASK, Script, World

with extra_imports("dspy", "the DSPy conformance harness"):
    import dspy
    from dspy.lm15 import Message, Request, Response, TextPart, Usage

    from planfence.adapters.dspy import PlanfenceReAct

_FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]\n")
_TRAILER = "\n\nRespond with the corresponding output fields"
# The model's own moves in the trajectory: not what the framework shows it.
_OWN = ("thought_", "tool_name_", "tool_args_")


def _fields(text: str) -> list[tuple[str, str]]:
    """The `[[ ## name ## ]]` sections of a chat-format message, in order."""
    parts = _FIELD.split(text.split(_TRAILER)[0])
    return [(parts[i], parts[i + 1].strip()) for i in range(1, len(parts) - 1, 2)]


def _answer(**fields: Any) -> Response:
    body = "".join(f"[[ ## {k} ## ]]\n{v}\n\n" for k, v in fields.items())
    message = Message.assistant([TextPart(body + "[[ ## completed ## ]]")])
    return Response(id=None, model="scripted", message=message, finish_reason="stop", usage=Usage())


class ScriptedEngine:
    """The async engine of a `dspy.LM`: each ReAct step asks the script; the extraction that
    ends the run answers `Script.FINAL`."""

    def __init__(self, script: Script, told: list[str]) -> None:
        self.script, self.told = script, told

    async def complete(self, request: Request) -> Response:
        system = request.system if isinstance(request.system, str) else ""
        if "next_tool_name" not in system:  # the extraction after the loop
            return _answer(reasoning="done", answer=Script.FINAL)
        fields = _fields(request.messages[-1].text or "")
        shown = [system] + [text for name, text in fields if not name.startswith(_OWN)]
        observations = [text for name, text in fields if name.startswith("observation_")]
        result = observations[-1] if observations else None
        if result is not None:
            self.told.append(result)
        step = await self.script.next(shown, result)
        if step is None:
            return _answer(next_thought="done", next_tool_name="finish", next_tool_args="{}")
        args = json.dumps(step.args)
        return _answer(next_thought="act", next_tool_name=step.tool, next_tool_args=args)

    def stream(self, request: Request) -> Any:
        raise NotImplementedError

    async def aclose(self) -> None:
        return None


class _NoSync:
    """The sync engine a custom async one needs beside it (the harness runs async only)."""

    def complete(self, request: Request) -> Response:
        raise NotImplementedError("the DSPy harness runs the module with acall")

    def stream(self, request: Request) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        return None


class DSPyHarness:
    name: ClassVar[str] = "dspy"
    extra: ClassVar[str] = "dspy"
    modules: ClassVar[Sequence[str]] = ("dspy",)
    tool_span: ClassVar[str | None] = None  # DSPy reports to its callbacks, not OpenTelemetry

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
        tools = [dspy.Tool(fn, name=name) for name, fn in world.tools().items()]
        react = PlanfenceReAct(
            world.store,
            world.policy,
            "task -> answer",
            tools,
            keys=[KEY] if plans else [],
            agent=AGENT,
            max_iters=script.max_calls + 2,
        )
        controlled(react.gate, checker)
        told: list[str] = []
        engine = ScriptedEngine(script, told)
        lm = dspy.LM("scripted", engine=_NoSync(), async_engine=engine, cache=False)
        try:
            with dspy.context(lm=lm):
                for n in range(runs):
                    if n:
                        script.new_run()
                    await react.acall(task=TASK)
        finally:
            if close:
                await react.aclose()
        return Run(told)
