"""OpenTelemetry: the gate and Janus report spans and metrics to a configured SDK, and nothing
without one.

The SDK's in-memory exporter and metric reader collect what planfence reports (the `otel`
fixture, otel_helpers.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from planfence.plugins import telemetry
from planfence.plugins.gate import Gate, Policy, ToolCall, create_plan
from planfence.shared_memory import AsyncStore

pytest.importorskip("opentelemetry.sdk", reason="pip install opentelemetry-sdk")

from docpages import block
from opentelemetry import trace
from opentelemetry.trace import StatusCode
from otel_helpers import Collected, reset_globals

POLICY = Policy.from_toml('[tools.ship_order]\ndepends_on = ["order/{order_id}"]\n')


def test_the_gate_pages_run_reports_its_decisions(otel: Collected) -> None:
    code = block("docs/gate.md", "Using the gate")
    exec(compile(code, "docs/gate.md", "exec"), {"__name__": "snippet"})
    spans = otel.finished()
    assert [s.name for s in spans] == ["planfence.check ship_order"] * 2
    replan, allow = (dict(s.attributes or {}) for s in spans)
    assert replan["planfence.verdict"] == "replan"
    assert replan["planfence.reason"] == "stale_dependencies"
    assert replan["planfence.stale.keys"] == ("address/ana",)
    assert replan["planfence.scope.keys"] == ("address/ana", "order/7")
    assert replan["gen_ai.tool.name"] == "ship_order"
    assert isinstance(replan["planfence.decision.id"], int)
    assert allow["planfence.verdict"] == "allow" and allow["planfence.stale.keys"] == ()
    assert allow["planfence.plan.id"] != replan["planfence.plan.id"]  # the replanned plan
    assert all(s.status.status_code is not StatusCode.ERROR for s in spans)
    counts = {
        (p.attributes["verdict"], p.attributes["reason"]): p.value
        for p in otel.points("planfence.gate.decisions")
    }
    assert counts == {("replan", "stale_dependencies"): 1, ("allow", "current"): 1}
    durations = otel.points("planfence.gate.duration")
    assert sum(p.count for p in durations) == 2
    assert all(0 < p.sum < 60 for p in durations)  # seconds, not milliseconds


async def _world(store: AsyncStore) -> str:
    await store.own("order/7", "sales")
    order = await store.put("order/7", {"status": "confirmed"}, author="sales")
    plan = await create_plan(store, author="planner", parents=[order.id])
    return plan.id


async def test_a_check_is_a_child_of_the_current_span_and_a_block_is_an_error(
    otel: Collected, astore: AsyncStore
) -> None:
    plan = await _world(astore)
    gate = Gate(astore, POLICY, agent="shipper")
    tracer = trace.get_tracer("a-framework")
    with tracer.start_as_current_span("execute_tool ship_order") as outer:
        await gate.check(ToolCall("ship_order", {"order_id": "7"}, plan))
    await gate.check(ToolCall("ship_order", {"order_id": "7"}, "not-a-plan"))
    await gate.check(ToolCall("unknown_tool", {}, plan))
    allowed, malformed, uncovered = otel.finished()
    assert allowed.parent is not None
    assert allowed.parent.span_id == outer.get_span_context().span_id
    assert allowed.context.trace_id == outer.get_span_context().trace_id
    assert dict(allowed.attributes or {})["gen_ai.agent.name"] == "shipper"
    for blocked in (malformed, uncovered):
        assert blocked.status.status_code is StatusCode.ERROR
        assert dict(blocked.attributes or {})["planfence.verdict"] == "block"
    assert uncovered.name == "planfence.check unknown_tool"


async def test_janus_decisions_are_spans_and_counted(otel: Collected) -> None:
    from planfence.plugins.janus import JanusConfig, JanusController, Task

    class Exact:
        async def evaluate(self, memory: Any, tasks: Any) -> list[bool]:
            return [str(t.answer) in str(memory) for t in tasks]

    config = JanusConfig(support_size=2, coverage_size=1, fresh_size=1, trigger="always")
    controller = JanusController(Exact(), config=config)
    memory = "facts: "
    for i in range(4):
        candidate = memory + f"{i} "
        verdict = await controller.consider(
            memory, candidate, Task(f"t{i}", f"q{i}", str(i)), key="notes/facts"
        )
        memory = candidate if verdict.deploy else memory
    spans = otel.finished("planfence.janus")
    assert [s.name for s in spans] == ["planfence.janus.decide notes/facts"] * 4
    for span in spans:
        attrs = dict(span.attributes or {})
        assert isinstance(attrs["planfence.janus.deployed"], bool)
        assert isinstance(attrs["planfence.janus.triggered"], bool)
    total = sum(p.value for p in otel.points("planfence.janus.decisions"))
    assert total == 4


def test_without_a_provider_nothing_is_made() -> None:
    reset_globals()
    assert telemetry.gate_span("t", None).__enter__() is telemetry.NOTHING
    assert not telemetry._tracing() and not telemetry._metering()


def test_the_observability_pages_exporter_setup_runs(otel: Collected) -> None:
    code = block("docs/observability.md", "Tracing and metrics")
    reset_globals()
    exec(compile(code, "docs/observability.md", "exec"), {"__name__": "snippet"})
    assert telemetry._tracing()
    asyncio.run(asyncio.sleep(0))
