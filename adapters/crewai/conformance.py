"""CrewAI harness: a one-agent `Crew` whose model is a `BaseLLM` subclass that asks the script
what to do on every call (returning native tool calls), with the `PlanfenceHooks` hooks installed.

CrewAI opens no OpenTelemetry span of its own around a tool (its telemetry records a "Tool Usage"
span on a private provider after the call), so case (h) checks that the gate's span is inside
the span the crew was run in. CrewAI's own files go to a temporary home (`private_home`), never
the user's."""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from typing import Any, ClassVar

from planfence.plugins.gate.checkers import CheckerFactory
from planfence.shared_memory.extras import extra_imports

from ..conformance.harness import Run, controlled
from ..conformance.world import AGENT, KEY, TASK, Script, World

os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")  # no reports to CrewAI's collector
_HOME: dict[str, str] = {}


def private_home() -> str:
    """Point CrewAI's own files at a temporary folder, for this process, before CrewAI is
    imported: whatever `XDG_DATA_HOME` says, CrewAI keeps credentials under
    `~/.local/share/crewai` and settings under `~/.config/crewai` (the home directory read at
    import), and its app data under the XDG data folder. The folder goes when the process
    ends."""
    if "home" not in _HOME:
        home = _HOME["home"] = tempfile.mkdtemp(prefix="planfence-crewai-home-")
        atexit.register(shutil.rmtree, home, ignore_errors=True)
        os.environ["HOME"] = home
        os.environ["XDG_DATA_HOME"] = os.path.join(home, ".local", "share")
        os.environ["XDG_CONFIG_HOME"] = os.path.join(home, ".config")
    return _HOME["home"]


def scripted_llm(script: Script, loop: asyncio.AbstractEventLoop) -> Any:
    """A CrewAI model (a `BaseLLM` subclass) whose every answer comes from the script: a native
    tool call, or text. CrewAI is imported here, so the suite lists the row without it."""
    from crewai.llms.base_llm import BaseLLM

    class ScriptedLLM(BaseLLM):  # type: ignore[misc]
        def supports_function_calling(self) -> bool:
            return True

        def get_context_window_size(self) -> int:
            return 100_000

        def call(self, messages: Any, tools: Any = None, *args: Any, **kwargs: Any) -> Any:
            shown = [
                m["content"]
                for m in messages
                if m.get("role") in ("system", "user") and isinstance(m.get("content"), str)
            ]
            last = messages[-1] if messages else {}
            result = last.get("content") if last.get("role") == "tool" else None
            if result is not None:
                self.told.append(str(result))
            # The model runs on CrewAI's worker thread; the script and the store on the suite's.
            step = asyncio.run_coroutine_threadsafe(script.next(shown, result), loop).result()
            if step is None:
                return Script.FINAL
            function = {"name": step.tool, "arguments": json.dumps(step.args)}
            return [{"id": f"call-{script.calls}", "type": "function", "function": function}]

    llm = ScriptedLLM(model="scripted")
    llm.told = []
    return llm


class CrewAIHarness:
    name: ClassVar[str] = "crewai"
    extra: ClassVar[str] = "crewai"
    modules: ClassVar[Sequence[str]] = ("crewai",)
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
        private_home()
        with extra_imports("crewai", "the CrewAI conformance harness"):
            from crewai import Agent, Crew, Task
            from crewai.tools import tool

            from planfence.adapters.crewai import PlanfenceHooks

        llm = scripted_llm(script, asyncio.get_running_loop())
        tools = [tool(name)(fn) for name, fn in world.tools().items()]
        booker = Agent(role=AGENT, goal="Book trips", backstory="Books.", llm=llm, tools=tools)
        task = Task(description=TASK, expected_output="the booking", agent=booker)
        crew = Crew(agents=[booker], tasks=[task])
        fence = PlanfenceHooks(world.store, world.policy, keys=[KEY] if plans else [], agent=AGENT)
        controlled(fence.gate, checker)
        fence.install()
        try:
            for n in range(runs):  # the same crew, kicked off again
                if n:
                    script.new_run()
                await crew.kickoff_async()
        finally:
            if close:
                await fence.aclose()
            else:
                fence.uninstall()  # the hooks are process-wide: the next case has its own
        return Run(llm.told)
