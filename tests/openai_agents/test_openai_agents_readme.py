"""The OpenAI Agents SDK page's snippet runs as written (on the SDK's `ScriptedModel`), and a
block ends the run the SDK's way, with the refusal's wire payload."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    RunConfig,
    Runner,
    ToolInputGuardrailTripwireTriggered,
    set_tracing_disabled,
)
from agents.testing import ScriptedModel
from docpages import block
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from planfence.adapters.openai_agents import PlanfenceGuardrail
from planfence.plugins.gate import Policy, find_decisions_sync
from planfence.shared_memory import open_async_store, open_store

PAGE = "docs/frameworks/openai-agents.md"
REQ = "trip/42/requirements"


# `Runner.run_sync` leaves its event loop open as the thread's current loop.
pytestmark = pytest.mark.usefixtures("closes_run_sync_loop")


@pytest.fixture(autouse=True)
def no_trace_export() -> Any:
    set_tracing_disabled(True)  # the SDK would export traces to its platform
    yield
    set_tracing_disabled(False)


def book(destination: str, n: int = 0) -> list[Any]:
    args = json.dumps({"destination": destination})
    call = ResponseFunctionToolCall(
        type="function_call", id=f"fc{n}", call_id=f"c{n}", name="book_flight", arguments=args
    )
    return [call]


def say(text: str) -> list[Any]:
    part = ResponseOutputText(type="output_text", text=text, annotations=[])
    return [
        ResponseOutputMessage(
            id="m", type="message", role="assistant", status="completed", content=[part]
        )
    ]


def test_openai_agents_page_snippet_runs(capsys: Any, tmp_path: Path) -> None:
    code = block(PAGE, "Add planfence to an OpenAI Agents SDK agent")
    # The snippet closes its store: on a file, what it wrote can be read back after.
    url = f"sqlite:///{tmp_path / 'team.db'}"
    code = code.replace('open_store("memory://")', f"open_store({url!r})")
    model = ScriptedModel([book("Lisbon"), say("Booked.")])
    namespace: dict[str, Any] = {"__name__": "snippet", "model": model}
    exec(compile(code, PAGE, "exec"), namespace)
    assert capsys.readouterr().out.strip() == "Booked."
    store = open_store(url)
    try:
        [allow] = find_decisions_sync(store, source="gate")
        assert (allow.verdict, allow.reason) == ("allow", "current")
        assert store.get(allow.plan).parents == (store.head(REQ),)
        assert "Lisbon" in (model.first_call.system_instructions or "")  # the records shown
    finally:
        store.close()


def test_a_block_ends_the_run_with_the_refusal_payload() -> None:
    store = open_store("memory://")
    store.own(REQ, "customer")
    store.put(REQ, {"destination": "Lisbon"}, author="customer")
    booked: list[str] = []

    def book_flight(destination: str) -> str:
        """Book the trip's flight."""
        booked.append(destination)
        return "booked"

    policy = Policy().declare("book_flight", depends_on=[REQ])
    fence = PlanfenceGuardrail(
        store, policy, agent="booker"
    )  # shows no records: its calls have no plan
    model = ScriptedModel([book("Lisbon"), say("Booked.")])
    agent = Agent(
        name="b", model=model, instructions=fence.instructions(), tools=[fence.tool(book_flight)]
    )
    try:
        with pytest.raises(ToolInputGuardrailTripwireTriggered) as stop:
            Runner.run_sync(agent, "Book it.", run_config=RunConfig(tracing_disabled=True))
        assert stop.value.output.output_info["reason"] == "missing_plan"
        assert stop.value.output.output_info["verdict"] == "block"
        assert booked == []
    finally:
        store.close()


def test_the_page_snippet_says_nothing_about_trace_export(tmp_path: Path) -> None:
    """Run as a user runs it (its own process, no OpenAI key): no "skipping trace export"."""
    code = block(PAGE, "Add planfence to an OpenAI Agents SDK agent")
    prelude = (
        "from agents.testing import ScriptedModel\n"
        f"from {__name__} import book, say\n"
        "model = ScriptedModel([book('Lisbon'), say('Booked.')])\n"
    )
    script = tmp_path / "snippet.py"
    script.write_text(prelude + code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "Booked."
    assert "trace export" not in done.stderr, done.stderr
    assert done.stderr == ""


async def test_a_closed_store_blocks_as_store_unavailable(tmp_path: Path) -> None:
    """Not `UserError: Error running tool` (the tool never ran): the SDK's block."""
    store = await open_async_store(f"sqlite:///{tmp_path / 'team.db'}")
    await store.aclose()  # before the run
    booked: list[str] = []

    def book_flight(destination: str) -> str:
        """Book the trip's flight."""
        booked.append(destination)
        return "booked"

    policy = Policy().declare("book_flight", depends_on=[REQ])
    fence = PlanfenceGuardrail(store, policy, keys=[REQ], agent="booker")
    model = ScriptedModel([book("Lisbon"), say("Booked.")])
    agent = Agent(
        name="b", model=model, instructions=fence.instructions(), tools=[fence.tool(book_flight)]
    )
    with pytest.raises(ToolInputGuardrailTripwireTriggered) as stop:
        await Runner.run(agent, "Book it.", run_config=RunConfig(tracing_disabled=True))
    assert stop.value.output.output_info["reason"] == "store_unavailable"
    assert booked == []
    assert "cannot be read" in (model.first_call.system_instructions or "")
