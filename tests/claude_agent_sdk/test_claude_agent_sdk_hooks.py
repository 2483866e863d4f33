"""The Claude Agent SDK adapter over the SDK's own `query()` and `ClaudeSDKClient`, with a
scripted CLI: the docs example runs, refusals reach the model as the CLI's denied tool results,
faults block, and the SDK's edges (MCP tool names, tools served without hooks, prompts in one
session, parallel tool uses) hold."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from claude_agent_sdk import (
    ClaudeAgentOptions,
    ClaudeSDKClient,
    ResultMessage,
    ToolResultBlock,
    UserMessage,
    query,
    tool,
)
from docpages import block

from planfence.adapters.claude_agent_sdk import PlanfenceClaudeHooks
from planfence.adapters.claude_agent_sdk.testing import Reply, ScriptedCLI, Turn
from planfence.fence import current
from planfence.plugins.gate import Middleware, Policy, find_decisions, find_decisions_sync
from planfence.shared_memory import AsyncStore, open_async_store, open_store

PAGE = "docs/frameworks/claude-agent-sdk.md"
REQ = "trip/42/requirements"
BOOK = "mcp__trip__book_flight"
POLICY = Policy().declare("book_flight", depends_on=[REQ])


def test_the_docs_example_runs_and_its_plan_cites_what_was_shown(
    capsys: Any, tmp_path: Path
) -> None:
    code = block(PAGE, "Example")
    # The example closes its store: on a file, what it wrote can be read back after.
    url = f"sqlite:///{tmp_path / 'team.db'}"
    code = code.replace('open_async_store("memory://")', f"open_async_store({url!r})")
    exec(compile(code, PAGE, "exec"), {"__name__": "docs_example"})
    assert capsys.readouterr().out.strip() == "booked a flight to Lisbon"
    store = open_store(url)
    try:
        [allow] = find_decisions_sync(store, source="gate")
        assert (allow.verdict, allow.reason, allow.tool) == ("allow", "current", "book_flight")
        assert store.get(allow.plan).parents == (store.head(REQ),)
    finally:
        store.close()


async def trip_store() -> AsyncStore:
    store = await open_async_store("memory://")
    await store.own(REQ, "customer")
    await store.put(REQ, {"destination": "Lisbon"}, author="customer")
    return store


class Booking:
    """The `book_flight` tool, recording each run and the fencing token it ran under."""

    def __init__(self) -> None:
        self.booked: list[str] = []
        self.tokens: list[Any] = []
        self.tool = tool("book_flight", "Book the trip's flight.", {"destination": str})(self.run)

    async def run(self, args: dict[str, Any]) -> dict[str, Any]:
        self.booked.append(args["destination"])
        self.tokens.append(current())
        return {"content": [{"type": "text", "text": f"booked a flight to {args['destination']}"}]}


def reading_model(seen: list[Turn]) -> Any:
    """Books the destination it read last (in what it was shown or a tool result) until a
    booking ran or it was blocked."""

    def answer(turn: Turn) -> Reply:
        seen.append(turn)
        last = turn.last_result or ""
        if last.startswith("booked") or "will not run" in last:
            return "Done."
        text = "\n".join([*turn.shown, *turn.results])
        found = re.findall(r'"destination":"(\w+)"', text)
        return (BOOK, {"destination": found[-1] if found else "nowhere"})

    return answer


def once(destination: str = "Lisbon") -> Any:
    """Calls `book_flight` once, then answers whatever the result."""
    answers = iter([(BOOK, {"destination": destination}), "Done."])
    return lambda turn: next(answers)


async def run(options: ClaudeAgentOptions, model: Any, prompt: str = "Book trip 42.") -> list[Any]:
    cli = ScriptedCLI(model, options)
    return [m async for m in query(prompt=prompt, options=options, transport=cli)]


def tool_results(messages: list[Any]) -> list[ToolResultBlock]:
    return [
        b
        for m in messages
        if isinstance(m, UserMessage) and isinstance(m.content, list)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]


async def test_a_stale_plan_is_a_denied_tool_use_whose_reason_names_the_current_value() -> None:
    store = await trip_store()
    booking, seen = Booking(), []
    fence = PlanfenceClaudeHooks(store, POLICY, keys=[REQ], agent="booker")
    options = ClaudeAgentOptions(
        mcp_servers={"trip": fence.server("trip", [booking.tool])}, hooks=fence.hooks
    )
    reading = reading_model(seen)

    async def thinking(turn: Turn) -> Reply:
        answer = reading(turn)
        if len(seen) == 1:  # another agent commits while the model thinks
            await store.put(REQ, {"destination": "Porto"}, author="customer")
        return answer

    try:
        messages = await run(options, thinking)
        refused, booked = tool_results(messages)
        assert refused.is_error is True and booked.is_error is False
        assert f"{REQ} changed" in str(refused.content)
        assert '{"destination":"Porto"}' in str(refused.content)
        assert booking.booked == ["Porto"]  # never Lisbon
        assert booking.tokens[0] is not None  # the served tool ran inside its allow
        # The prompt's records stay in the conversation, not called current.
        assert not any("current" in s.lower() for s in seen[-1].shown)
        await fence.aclose()
        verdicts = [(d.verdict, d.reason) for d in reversed(await find_decisions(store))]
        assert verdicts == [("replan", "stale_dependencies"), ("allow", "current")]
    finally:
        await store.aclose()


async def test_a_block_ends_in_words_and_its_wire_payload() -> None:
    store = await trip_store()
    booking = Booking()
    fence = PlanfenceClaudeHooks(store, POLICY, agent="booker")  # no keys: no plan
    options = ClaudeAgentOptions(
        mcp_servers={"trip": fence.server("trip", [booking.tool])}, hooks=fence.hooks
    )
    try:
        [result] = tool_results(await run(options, reading_model([])))
        assert booking.booked == []
        text = str(result.content)
        message, payload = text.rsplit("\n", 1)
        assert result.is_error is True and "This action will not run." in message
        assert json.loads(payload)["verdict"] == "block"
        assert json.loads(payload)["reason"] == "missing_plan"
    finally:
        await fence.aclose()
        await store.aclose()


class Broken(Middleware):
    async def on_call_tool(self, call: Any, call_next: Any) -> Any:
        raise RuntimeError("injected: the gate's stack failed")


async def test_a_fault_in_the_gate_is_a_block_and_the_tool_does_not_run() -> None:
    store = await trip_store()
    booking = Booking()
    fence = PlanfenceClaudeHooks(store, POLICY, keys=[REQ], middleware=[Broken()])
    options = ClaudeAgentOptions(
        mcp_servers={"trip": fence.server("trip", [booking.tool])}, hooks=fence.hooks
    )
    try:
        [result] = tool_results(await run(options, reading_model([])))
        assert booking.booked == []
        assert result.is_error is True and '"verdict": "block"' in str(result.content)
        assert "internal_error" in str(result.content)
    finally:
        await fence.aclose()
        await store.aclose()


async def test_a_hook_that_fails_blocks_the_call_through_the_cli() -> None:
    """The PreToolUse matcher is `on_failure="block"`: a callback that raises (here the fence's
    own, replaced) is a block in the CLI, not a call that goes ahead."""
    store = await trip_store()
    booking = Booking()
    fence = PlanfenceClaudeHooks(store, POLICY, keys=[REQ])

    async def fails(*args: Any) -> Any:
        raise RuntimeError("injected: the hook failed")

    fence._on_pre_tool = fails  # type: ignore[method-assign]
    options = ClaudeAgentOptions(
        mcp_servers={"trip": fence.server("trip", [booking.tool])}, hooks=fence.hooks
    )
    try:
        [result] = tool_results(await run(options, once()))
        assert result.is_error is True and "injected: the hook failed" in str(result.content)
        assert booking.booked == []  # and the served tool had no allow either
    finally:
        await fence.aclose()
        await store.aclose()


async def test_a_served_tool_without_the_hooks_does_not_run_and_says_why() -> None:
    store = await trip_store()
    booking = Booking()
    fence = PlanfenceClaudeHooks(store, POLICY, keys=[REQ])
    options = ClaudeAgentOptions(mcp_servers={"trip": fence.server("trip", [booking.tool])})
    try:
        [result] = tool_results(await run(options, reading_model([])))
        assert booking.booked == []
        assert result.is_error is True and "was not judged" in str(result.content)
        [refusal] = await find_decisions(store)
        assert (refusal.verdict, refusal.reason) == ("block", "not_judged")
    finally:
        await fence.aclose()
        await store.aclose()


async def test_the_clis_own_tools_are_judged_by_name_and_undeclared_is_denied() -> None:
    store = await trip_store()
    fence = PlanfenceClaudeHooks(store, POLICY, keys=[REQ])
    options = ClaudeAgentOptions(hooks=fence.hooks)
    calls = iter([("Bash", {"command": "rm -rf trip-42"}), "Done."])
    try:
        [result] = tool_results(await run(options, lambda turn: next(calls)))
        assert result.is_error is True and "undeclared_tool" in str(result.content)
        assert "No such tool" not in str(result.content)  # denied before the CLI looked
    finally:
        await fence.aclose()
        await store.aclose()


async def test_a_policy_that_declares_the_full_mcp_name_is_judged_under_it() -> None:
    store = await trip_store()
    booking = Booking()
    policy = Policy().declare(BOOK, depends_on=[REQ])
    fence = PlanfenceClaudeHooks(store, policy, keys=[REQ])
    options = ClaudeAgentOptions(
        mcp_servers={"trip": fence.server("trip", [booking.tool])}, hooks=fence.hooks
    )
    try:
        await run(options, reading_model([]))
        assert booking.booked == ["Lisbon"]
        await fence.aclose()
        [allow] = await find_decisions(store)
        assert (allow.verdict, allow.tool) == ("allow", BOOK)
    finally:
        await store.aclose()


async def test_parallel_tool_uses_of_one_answer_act_under_one_plan() -> None:
    store = await trip_store()
    booking = Booking()
    fence = PlanfenceClaudeHooks(store, POLICY, keys=[REQ])
    options = ClaudeAgentOptions(
        mcp_servers={"trip": fence.server("trip", [booking.tool])}, hooks=fence.hooks
    )
    twice = [(BOOK, {"destination": "Lisbon"}), (BOOK, {"destination": "Lisbon"})]
    answers = iter([twice, "Done."])
    try:
        await run(options, lambda turn: next(answers))
        assert booking.booked == ["Lisbon", "Lisbon"]
        assert all(t is not None for t in booking.tokens)
        await fence.aclose()
        plans = {d.plan for d in await find_decisions(store)}
        assert len(plans) == 1
    finally:
        await store.aclose()


async def test_each_prompt_of_a_client_session_shows_the_records_again_with_its_own_chain() -> None:
    """Two prompts in one `ClaudeSDKClient` session: the second is shown the records as they
    are then, and its first stale plan is a replan of its own, not a stale_after_replan."""
    store = await trip_store()
    booking = Booking()
    fence = PlanfenceClaudeHooks(store, POLICY, keys=[REQ])
    options = ClaudeAgentOptions(
        mcp_servers={"trip": fence.server("trip", [booking.tool])}, hooks=fence.hooks
    )
    before: dict[int, int] = {}  # prompt number -> tool results before it

    async def model(turn: Turn) -> Reply:
        prompt = sum(s.startswith("Book") for s in turn.shown)
        mine = turn.results[before.setdefault(prompt, len(turn.results)) :]
        if mine and mine[-1].startswith("booked"):
            return "Done."
        if not mine:  # another agent commits while the model thinks on the prompt
            await store.put(
                REQ, {"destination": ("Porto", "Madrid")[prompt - 1]}, author="customer"
            )
        text = "\n".join([turn.shown[-1], *mine])  # this prompt's records and results
        return (BOOK, {"destination": re.findall(r'"destination":"(\w+)"', text)[-1]})

    cli = ScriptedCLI(model, options)
    try:
        async with ClaudeSDKClient(options, transport=cli) as client:
            for prompt in ("Book trip 42.", "Book it once more."):
                await client.query(prompt)
                async for message in client.receive_response():
                    assert not isinstance(message, ResultMessage) or not message.is_error
        assert booking.booked == ["Porto", "Madrid"]
        assert '"destination":"Porto"' in cli.shown[-1]  # the second prompt's records
        await fence.aclose()
        verdicts = [(d.verdict, d.reason) for d in reversed(await find_decisions(store))]
        assert [v for v in verdicts if v[0] != "allow"] == [
            ("replan", "stale_dependencies"),
            ("replan", "stale_dependencies"),
        ]
    finally:
        await store.aclose()


async def test_a_store_that_cannot_be_read_is_said_and_gated_calls_are_denied(
    tmp_path: Path,
) -> None:
    store = await open_async_store(f"sqlite:///{tmp_path / 'team.db'}")
    await store.aclose()  # before the prompt
    booking, seen = Booking(), []
    fence = PlanfenceClaudeHooks(store, POLICY, keys=[REQ])
    options = ClaudeAgentOptions(
        mcp_servers={"trip": fence.server("trip", [booking.tool])}, hooks=fence.hooks
    )
    calls = iter([(BOOK, {"destination": "Lisbon"}), "Done."])

    def model(turn: Turn) -> Reply:
        seen.append(turn)
        return next(calls)

    [result] = tool_results(await run(options, model))
    assert booking.booked == []
    assert "cannot be read" in seen[0].shown[-1]
    assert result.is_error is True and "store_unavailable" in str(result.content)
    await fence.aclose()


async def test_an_allow_its_tool_did_not_pick_up_in_time_is_let_go(monkeypatch: Any) -> None:
    """An allow waits `PENDING_TTL` for its served tool (a call the CLI denied after the hook
    never comes); past it the allow is let go, and a call arriving on it does not run."""
    from planfence.adapters.claude_agent_sdk import hooks

    monkeypatch.setattr(hooks, "PENDING_TTL", -1.0)  # every allow is already too old
    store = await trip_store()
    booking = Booking()
    fence = PlanfenceClaudeHooks(store, POLICY, keys=[REQ], agent="booker")
    options = ClaudeAgentOptions(
        mcp_servers={"trip": fence.server("trip", [booking.tool])}, hooks=fence.hooks
    )
    try:
        [result] = tool_results(await run(options, reading_model([])))
        assert booking.booked == []
        assert result.is_error is True and "was not judged" in str(result.content)
        await fence.aclose()
        verdicts = sorted((d.verdict, d.reason) for d in await find_decisions(store))
        assert verdicts == [("allow", "current"), ("block", "not_judged")]  # allows are queued
    finally:
        await store.aclose()
