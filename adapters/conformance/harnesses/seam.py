"""The reference harness: no framework, the gate's seam used directly (`PlanStamper` on the read
side, `GateMiddleware.guard` on the act side). A new adapter's harness has this shape, with the
framework's own agent, model interface and extension points in place of the loop below."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from planfence.adapters._records import DEFAULT_HEADER, records_text
from planfence.plugins.gate import CheckerFactory, GateMiddleware, PlanStamper, ToolCall, explain

from ..harness import Run
from ..world import AGENT, KEY, Script, World


class SeamHarness:
    name: ClassVar[str] = "seam"
    extra: ClassVar[str] = "all"
    modules: ClassVar[Sequence[str]] = ()
    tool_span: ClassVar[str | None] = None

    async def run(
        self, world: World, script: Script, *, checker: CheckerFactory | None, plans: bool
    ) -> Run:
        gate = GateMiddleware(world.store, world.policy, checker=checker, agent=AGENT)
        stamper = PlanStamper(world.store, AGENT)
        tools = world.tools()
        run, last = Run(), None
        try:
            while True:
                records = await stamper.current([KEY]) if plans else []
                shown = [records_text(DEFAULT_HEADER, records)] if records else []
                step = await script.next(shown, last)
                if step is None:
                    return run
                plan = (await stamper.stamp([r.id for r in records])).id if plans else None
                async with gate.guard(ToolCall(step.tool, step.args, plan)) as judged:
                    if judged.allowed:
                        last = await tools[step.tool](str(step.args["destination"]))
                    else:
                        last = explain(judged.verdict)
                run.told.append(last)
        finally:
            await gate.aclose()
