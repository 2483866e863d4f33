"""Inside a real AutoGen run, the gate's `planfence.check` span is the child of the
`execute_tool` span AutoGen opens for the tool, and a refused call marks that span an error."""

from __future__ import annotations

import json

import pytest
from otel_helpers import Collected

pytest.importorskip("autogen_agentchat", reason="pip install 'planfence[autogen]'")

from autogen_agentchat.agents import AssistantAgent
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, ModelInfo, RequestUsage
from autogen_core.tools import FunctionTool, StaticWorkbench
from autogen_ext.models.replay import ReplayChatCompletionClient
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from planfence.adapters.autogen import PlanfenceWorkbench
from planfence.plugins.gate import Policy, create_plan
from planfence.shared_memory import AsyncStore, open_async_store

KEY = "trip/42/requirements"
POLICY = Policy().declare("book_flight", depends_on=[KEY])
MODEL = ModelInfo(
    vision=False,
    function_calling=True,
    json_output=False,
    family="unknown",
    structured_output=False,
    multiple_system_messages=True,
)


def _calls(*destinations: str) -> list[CreateResult | str]:
    script: list[CreateResult | str] = []
    for i, destination in enumerate(destinations):
        args = json.dumps({"destination": destination})
        call = FunctionCall(id=f"call-{i}", name="book_flight", arguments=args)
        usage = RequestUsage(prompt_tokens=0, completion_tokens=0)
        script.append(
            CreateResult(finish_reason="function_calls", content=[call], usage=usage, cached=False)
        )
    return script


async def _run(store: AsyncStore, plan: str, destinations: list[str]) -> list[str]:
    booked: list[str] = []

    def book_flight(destination: str) -> str:
        """Book the flight for the trip."""
        booked.append(destination)
        return f"booked {destination}"

    tools = StaticWorkbench([FunctionTool(book_flight, description="Book a flight.")])
    fence = PlanfenceWorkbench(tools, store=store, policy=POLICY, agent="executor")
    fence.bind(plan)
    agent = AssistantAgent(
        "executor",
        ReplayChatCompletionClient(_calls(*destinations), model_info=MODEL),
        workbench=fence,
        max_tool_iterations=len(destinations),
    )
    await agent.run(task="Book the flight for trip 42.")
    return booked


def _checks_and_their_parents(otel: Collected) -> list[tuple[ReadableSpan, ReadableSpan]]:
    spans = otel.spans.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    pairs = []
    for check in (s for s in spans if s.name == "planfence.check book_flight"):
        assert check.parent is not None, "a check outside any span"
        pairs.append((check, by_id[check.parent.span_id]))
    return pairs


async def test_the_check_is_a_child_of_autogens_execute_tool_span(otel: Collected) -> None:
    store = await open_async_store("memory://")
    try:
        await store.own(KEY, "customer")
        first = await store.put(KEY, {"destination": "Lisbon"}, author="customer")
        plan = await create_plan(store, author="planner", parents=[first.id])
        await store.put(KEY, {"destination": "Porto"}, author="customer")  # stale from now on
        fresh = await create_plan(store, author="planner", parents=[await store.head(KEY)])
        assert await _run(store, plan.id, ["Lisbon"]) == []
        assert await _run(store, fresh.id, ["Porto"]) == ["Porto"]
    finally:
        await store.aclose()

    (refused, refused_tool), (allowed, allowed_tool) = _checks_and_their_parents(otel)
    for check, tool in ((refused, refused_tool), (allowed, allowed_tool)):
        assert tool.name == "execute_tool book_flight"
        assert dict(tool.attributes or {})["gen_ai.operation.name"] == "execute_tool"
        assert check.context.trace_id == tool.context.trace_id
    tool_spans = [s for s in otel.spans.get_finished_spans() if s.name.startswith("execute_tool")]
    assert len(tool_spans) == 2  # one per call: the fence adds none of its own
    assert dict(refused.attributes or {})["planfence.verdict"] == "replan"
    assert refused.status.status_code is not StatusCode.ERROR  # a replan is not a block
    assert refused_tool.status.status_code is StatusCode.ERROR  # the tool did not run
    assert dict(allowed.attributes or {})["planfence.verdict"] == "allow"
    assert allowed_tool.status.status_code is not StatusCode.ERROR
