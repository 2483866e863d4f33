"""The reference harness: no framework, the gate's seam used directly (`PlanStamper` on the read
side, `GateMiddleware.guard` on the act side). A new adapter's harness has this shape, with the
framework's own agent, model interface and extension points in place of the loop below.

The loop is the framework here, so it does what a framework does around a tool: a call whose
arguments do not fit the tool is answered with the error (the model may try again), and a store
that cannot be reached while it shows the records or stamps the plan is a refusal, never an
exception (see `planfence.adapters.base`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from planfence.adapters.base import DEFAULT_HEADER, read, reads_or_down, shown_text, stamp
from planfence.plugins.gate import GateMiddleware, PlanStamper, ToolCall
from planfence.plugins.gate.checkers import CheckerFactory
from planfence.plugins.gate.explain import explain

from .harness import Run, controlled
from .world import AGENT, KEY, Script, World


class SeamHarness:
    name: ClassVar[str] = "seam"
    extra: ClassVar[str] = "all"
    modules: ClassVar[Sequence[str]] = ()
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
        gate = controlled(GateMiddleware(world.store, world.policy, agent=AGENT), checker)
        run = Run()
        try:
            for n in range(runs):
                if n:
                    script.new_run()
                await self._once(world, script, gate, run, plans)
        finally:
            if close:
                await gate.aclose()
        return run

    @staticmethod
    async def _once(
        world: World, script: Script, gate: GateMiddleware, run: Run, plans: bool
    ) -> None:
        stamper = PlanStamper(world.store, AGENT)  # each run its own plan chain
        tools = world.tools()
        last = None
        while True:
            records = await read(stamper, [KEY]) if plans else []
            shown = [shown_text(DEFAULT_HEADER, records)] if records else []
            step = await script.next(shown, last)
            if step is None:
                return
            plan = await stamp(stamper, reads_or_down(records)) if plans else None
            async with gate.guard(ToolCall(step.tool, step.args, plan)) as judged:
                if not judged.allowed:
                    last = explain(judged.verdict)
                elif set(step.args) != {"destination"}:
                    last = f"error: {step.tool} takes one argument, destination"
                else:
                    last = await tools[step.tool](str(step.args["destination"]))
            run.told.append(last)
