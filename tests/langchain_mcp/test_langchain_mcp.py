"""MCP tools from `langchain-mcp-adapters` in `create_agent` with `PlanfenceAgentMiddleware`: the
docs example runs, refusals reach the model as error `ToolMessage`s and never the MCP server, a
store fault is a block, and `PlanfenceSession` carries only the gate's fencing token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from docpages import block
from langchain.agents import create_agent
from langchain_core.messages import ToolMessage
from langchain_mcp_adapters.tools import load_mcp_tools
from mcp.client.stdio import stdio_client

from planfence.adapters.conformance.world import BOOK, KEY, Outage, Script, World, open_world
from planfence.adapters.langchain_mcp import PlanfenceSession
from planfence.adapters.langchain_mcp.conformance import upstream
from planfence.adapters.langgraph import PlanfenceAgentMiddleware
from planfence.adapters.langgraph.conformance import TASK_INPUT, ScriptedChatModel
from planfence.adapters.mcp.meta import META_FENCE
from planfence.fence import MalformedFenceError, verify
from planfence.shared_memory import AsyncStore


def test_docs_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    code = block("docs/frameworks/langchain-mcp.md", "The middleware around MCP tools")
    exec(compile(code, "langchain-mcp.md", "exec"), {"__name__": "docs"})
    assert capsys.readouterr().out.strip() == "booked a flight to Lisbon done"


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    w = await open_world(tmp_path)
    try:
        yield w
    finally:
        await w.aclose()


async def run(world: World, script: Script, store: AsyncStore | None = None) -> dict[str, Any]:
    fence = PlanfenceAgentMiddleware(store or world.store, world.policy, keys=[KEY], agent="b")
    try:
        async with (
            stdio_client(upstream(world)) as (read, write),
            PlanfenceSession(read, write) as session,
        ):
            await session.initialize()
            tools = await load_mcp_tools(session)
            agent = create_agent(ScriptedChatModel(script=script), tools, middleware=[fence])
            state: dict[str, Any] = await agent.ainvoke(TASK_INPUT)
            return state
    finally:
        await fence.aclose()


def tool_messages(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


async def test_a_stale_plan_is_an_error_tool_message_and_never_reaches_the_server(
    world: World,
) -> None:
    script = Script(meanwhile={0: lambda: world.revise("Porto")})
    state = await run(world, script)
    refusal, booked = tool_messages(state)
    assert refusal.status == "error" and "Porto" in refusal.text
    assert refusal.artifact["planfence"]["verdict"] == "replan"
    assert booked.text == "booked a flight to Porto"
    effects = world.effects.of(BOOK)
    assert [e.args["destination"] for e in effects] == ["Porto"]  # Lisbon never reached it
    token = effects[0].fence  # the allow's token came in _meta and verifies
    assert token is not None
    checked = await verify(token, world.others, tool=BOOK, args=effects[0].args)
    assert checked.heads[KEY].head == await world.head()
    assert state["planfence_outcome"]["status"] == "done"


async def test_a_store_that_fails_during_the_check_is_a_block(world: World) -> None:
    fence_store = world.store
    down = Outage(fence_store)
    state = await run(world, Script(meanwhile={0: _set(down)}), store=down)
    assert world.effects.of(BOOK) == []
    [refusal] = tool_messages(state)
    assert refusal.status == "error" and "store_unavailable" in refusal.text
    assert state["planfence_outcome"]["status"] == "blocked"


def _set(down: Outage) -> Any:
    async def go() -> None:
        down.down = True

    return go


async def test_the_session_sends_the_gate_token_only(world: World) -> None:
    """Outside an allow no token goes to the server, and one a caller put in `_meta` is dropped."""
    async with (
        stdio_client(upstream(world)) as (read, write),
        PlanfenceSession(read, write) as session,
    ):
        await session.initialize()
        forged = {"v": 1, "tool": BOOK, "plan": "x"}
        await session.call_tool(BOOK, {"destination": "Lisbon"}, meta={META_FENCE: forged})
    [effect] = world.effects.of(BOOK)
    assert effect.fence is None


async def test_an_interceptor_that_changes_the_call_after_the_check_sends_nothing(
    world: World,
) -> None:
    """Interceptors run inside the tool, after the gate: a call they rewrite is not the one the
    gate allowed, so the session sends nothing and the run fails with the reason."""

    async def elsewhere(request: Any, handler: Any) -> Any:
        return await handler(request.override(args={**request.args, "destination": "Porto"}))

    fence = PlanfenceAgentMiddleware(world.store, world.policy, keys=[KEY], agent="b")
    try:
        async with (
            stdio_client(upstream(world)) as (read, write),
            PlanfenceSession(read, write) as session,
        ):
            await session.initialize()
            tools = await load_mcp_tools(session, tool_interceptors=[elsewhere])
            model = ScriptedChatModel(script=Script())
            agent = create_agent(model, tools, middleware=[fence])
            with pytest.raises(Exception) as raised:  # noqa: PT011 (possibly in a group)
                await agent.ainvoke(TASK_INPUT)
    finally:
        await fence.aclose()
    assert world.effects.of(BOOK) == []  # neither the judged call nor the rewritten one ran
    found = [raised.value, *getattr(raised.value, "exceptions", ())]
    assert any(isinstance(e, MalformedFenceError) for e in found), repr(raised.value)
    assert "interceptor changed the call" in str(
        next(e for e in found if isinstance(e, MalformedFenceError))
    )


async def test_a_prefixed_tool_name_is_the_call_the_gate_allowed(world: World) -> None:
    """With `tool_name_prefix` the agent calls `<server>_<tool>` and the server `<tool>`."""
    policy = world.policy.declare(f"trips_{BOOK}", [KEY])
    fence = PlanfenceAgentMiddleware(world.store, policy, keys=[KEY], agent="b")
    try:
        async with (
            stdio_client(upstream(world)) as (read, write),
            PlanfenceSession(read, write, server_name="trips") as session,
        ):
            await session.initialize()
            tools = await load_mcp_tools(session, server_name="trips", tool_name_prefix=True)
            model = ScriptedChatModel(script=Script(tool=f"trips_{BOOK}"))
            agent = create_agent(model, tools, middleware=[fence])
            await agent.ainvoke(TASK_INPUT)
    finally:
        await fence.aclose()
    [effect] = world.effects.of(BOOK)
    assert effect.fence is not None and effect.fence["tool"] == f"trips_{BOOK}"
