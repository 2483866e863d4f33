"""What the upstream sends back through the proxy besides results: its questions to the client
(sampling, elicitation, roots), its logs and its change notices; and the client's own connection
requests (resource subscriptions, log level, roots changed) on their way up.

The proxy runs as a subprocess in front of the test upstream, driven by the official client with
its callbacks. Client mode "legacy" is the 2025-11-25 handshake, "auto" the 2026-07-28 envelope;
the upstream mode is the proxy's `--upstream-mode`.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.session import ClientRequestContext
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_helpers import UPSTREAM, World, background, connect, free_port, wait_for, wait_for_port

# (client mode, upstream mode): the upstream's questions arrive as mid-call requests (legacy
# upstream) or as an `input_required` result (2026 upstream); a 2026 client answers the latter
# itself, a handshake-era client is asked by the proxy.
RELAYED = [("legacy", "legacy"), ("legacy", "auto"), ("auto", "auto")]
ALL = [*RELAYED, ("auto", "legacy")]


def _id(pair: tuple[str, str]) -> str:
    return f"client-{pair[0]}-upstream-{pair[1]}"


def _params(world: World, upstream_mode: str) -> StdioServerParameters:
    return world.proxy_params("--upstream-mode", upstream_mode)


class Asked:
    """Client callbacks that answer the upstream's questions and remember them."""

    def __init__(self) -> None:
        self.elicited: list[str] = []
        self.sampled: list[str] = []
        self.roots_asked = 0

    async def elicit(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        self.elicited.append(params.message)
        return types.ElicitResult(action="accept", content={"answer": "Lisbon"})

    async def sample(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult:
        content = params.messages[0].content
        self.sampled.append(content.text if isinstance(content, types.TextContent) else "?")
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text="a line about the sea"),
            model="test-model",
        )

    async def roots(self, context: ClientRequestContext) -> types.ListRootsResult:
        self.roots_asked += 1
        return types.ListRootsResult(
            roots=[types.Root(uri="file:///work/trip", name="trip")]  # type: ignore[arg-type]
        )

    def callbacks(self) -> dict[str, Any]:
        return {
            "elicitation_callback": self.elicit,
            "sampling_callback": self.sample,
            "list_roots_callback": self.roots,
        }


@pytest.mark.parametrize("modes", RELAYED, ids=_id)
async def test_upstream_questions_reach_the_client(world: World, modes: tuple[str, str]) -> None:
    client_mode, upstream_mode = modes
    asked = Asked()
    async with connect(_params(world, upstream_mode), client_mode, **asked.callbacks()) as client:
        answered = await client.call_tool("ask", {"question": "Where to?"})
        assert answered.is_error is False
        assert answered.content[0].text == "answer: Lisbon"
        assert answered.meta["dev.planfence/decision"]["verdict"] == "allow"

        composed = await client.call_tool("compose", {"topic": "the sea"})
        assert composed.content[0].text == "a line about the sea"

        roots = await client.call_tool("client_roots", {})
        assert roots.content[0].text == "file:///work/trip"

    assert asked.elicited == ["Where to?"]
    assert asked.sampled == ["Write one line about the sea."]
    assert asked.roots_asked == 1
    [effect] = world.effects_log("asked")
    assert effect["answer"] == "Lisbon"


@pytest.mark.parametrize("modes", ALL, ids=_id)
async def test_a_client_without_the_capability_gets_an_error_not_a_hang(
    world: World, modes: tuple[str, str]
) -> None:
    client_mode, upstream_mode = modes
    async with connect(_params(world, upstream_mode), client_mode) as client:
        with anyio.fail_after(30):  # a generous bound: the point is that the call returns
            if modes == ("auto", "auto"):
                # A 2026 client answers an `input_required` result itself, and refuses.
                with pytest.raises(MCPError, match="not supported"):
                    await client.call_tool("ask", {"question": "Where to?"})
            else:
                result = await client.call_tool("ask", {"question": "Where to?"})
                assert result.is_error is True
                assert "not supported" in result.content[0].text
        # The proxy keeps serving.
        echo = await client.call_tool("echo", {"text": "still here"})
        assert echo.content[0].text == "still here"
    assert world.effects_log("asked") == []


async def test_a_2026_client_behind_a_handshake_upstream_cannot_be_asked(world: World) -> None:
    # The 2026 protocol has no server-to-client requests, so the proxy refuses the upstream's
    # mid-call question on the client's behalf, even though the client has the callback.
    asked = Asked()
    async with connect(_params(world, "legacy"), "auto", **asked.callbacks()) as client:
        result = await client.call_tool("ask", {"question": "Where to?"})
    assert result.is_error is True
    assert "Elicitation not supported" in result.content[0].text
    assert asked.elicited == []


class Logs:
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    async def __call__(self, params: types.LoggingMessageNotificationParams) -> None:
        self.seen.append((params.level, params.data))


@pytest.mark.parametrize("modes", ALL, ids=_id)
async def test_logs_reach_the_client_that_made_the_call(
    world: World, modes: tuple[str, str]
) -> None:
    client_mode, upstream_mode = modes
    logs = Logs()
    # A 2026 client opts in per request; a handshake-era client receives every level.
    level: dict[str, Any] = {"log_level": "info"} if client_mode == "auto" else {}
    async with connect(
        _params(world, upstream_mode), client_mode, logging_callback=logs, **level
    ) as client:
        result = await client.call_tool("chatty", {"steps": 2})
        assert result.content[0].text == "logged 2"
    expected = [("info", "step 1"), ("info", "step 2")]
    if client_mode == "legacy":
        expected.insert(0, ("debug", "starting"))
    assert logs.seen == expected


@pytest.mark.parametrize("upstream_mode", ["auto", "legacy"])
async def test_a_2026_client_that_did_not_opt_in_gets_no_logs(
    world: World, upstream_mode: str
) -> None:
    logs = Logs()
    async with connect(_params(world, upstream_mode), "auto", logging_callback=logs) as client:
        await client.call_tool("chatty", {"steps": 2})
        await client.call_tool("echo", {"text": "x"})
    assert logs.seen == []


async def test_log_level_and_roots_changed_pass_through(world: World) -> None:
    logs = Logs()
    asked = Asked()
    async with connect(
        _params(world, "legacy"), "legacy", logging_callback=logs, **asked.callbacks()
    ) as client:
        # (The typed request, not the client's deprecated convenience method.)
        await client.session.send_request(
            types.SetLevelRequest(params=types.SetLevelRequestParams(level="info")),
            types.EmptyResult,
        )
        await client.call_tool("chatty", {"steps": 1})
        await client.session.send_notification(types.RootsListChangedNotification())
        await wait_for(lambda: bool(world.effects_log("roots_changed")), "roots_changed upstream")
    assert [e["level"] for e in world.effects_log("set_level")] == ["info"]
    assert logs.seen == [("info", "step 1")]


class Notices:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def __call__(self, message: Any) -> None:
        if not isinstance(message, Exception | types.LoggingMessageNotification):
            self.seen.append(message)

    def of(self, kind: type) -> list[Any]:
        return [m for m in self.seen if isinstance(m, kind)]


@pytest.mark.parametrize("upstream_mode", ["auto", "legacy"])
async def test_tool_list_changes_reach_a_handshake_client(world: World, upstream_mode: str) -> None:
    notices = Notices()
    async with connect(_params(world, upstream_mode), "legacy", message_handler=notices) as client:
        assert client.server_capabilities.tools is not None
        assert client.server_capabilities.tools.list_changed is True
        await client.call_tool("grow", {"name": "echo_two"})
        await wait_for(lambda: bool(notices.of(types.ToolListChangedNotification)), "the notice")
        names = [t.name for t in (await client.list_tools()).tools]
    assert "echo_two" in names


@pytest.mark.parametrize("upstream_mode", ["auto", "legacy"])
async def test_tool_list_changes_reach_a_2026_listener(world: World, upstream_mode: str) -> None:
    async with connect(_params(world, upstream_mode), "auto") as client:
        async with client.listen(tools_list_changed=True) as subscription:
            await client.call_tool("grow", {"name": "echo_three"})
            with anyio.fail_after(30):
                event = await subscription.__anext__()
        assert type(event).__name__ == "ToolsListChanged"
        names = [t.name for t in (await client.list_tools()).tools]
    assert "echo_three" in names


async def test_resource_updates_follow_subscriptions(world: World) -> None:
    uri = "test://greeting"
    first = Notices()
    async with connect(_params(world, "legacy"), "legacy", message_handler=first) as client:
        assert client.server_capabilities.resources is not None
        assert client.server_capabilities.resources.subscribe is True
        subscribe = types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri))
        await client.session.send_request(subscribe, types.EmptyResult)
        await client.session.send_request(subscribe, types.EmptyResult)  # once upstream
        await client.call_tool("touch", {"uri": uri})
        await client.call_tool("touch", {"uri": "test://other"})
        await wait_for(lambda: bool(first.of(types.ResourceUpdatedNotification)), "the update")
        unsubscribe = types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri))
        await client.session.send_request(unsubscribe, types.EmptyResult)
        await client.call_tool("touch", {"uri": uri})
        # A later notice on the same connection proves the one above was not delivered.
        await client.call_tool("grow", {"name": "echo_four"})
        await wait_for(lambda: bool(first.of(types.ToolListChangedNotification)), "a later notice")
    assert [n.params.uri for n in first.of(types.ResourceUpdatedNotification)] == [uri]
    assert [e["uri"] for e in world.effects_log("subscribe")] == [uri]
    assert [e["uri"] for e in world.effects_log("unsubscribe")] == [uri]


@asynccontextmanager
async def http_upstream(world: World, tmp_path: Path) -> AsyncIterator[str]:
    port = free_port()
    command = [sys.executable, UPSTREAM, "--effects", str(world.effects)]
    async with background([*command, "--transport", "http", "--port", str(port)], tmp_path / "up"):
        await wait_for_port(port)
        yield f"http://127.0.0.1:{port}/mcp"


async def test_a_2026_http_upstream_gets_the_headers_its_tools_declare(
    world: World, tmp_path: Path
) -> None:
    # `route` declares `x-mcp-header: Region`: a 2026 HTTP server rejects a call whose
    # `Mcp-Param-Region` header does not mirror the argument.
    async with http_upstream(world, tmp_path) as url:
        params = world.proxy_params("--upstream-url", url, upstream=[])
        async with connect(params) as client:
            result = await client.call_tool("route", {"region": "eu-west"})
    assert result.is_error is False, result.content
    assert result.content[0].text == "routed to eu-west"


async def test_questions_from_an_http_upstream_reach_the_client(
    world: World, tmp_path: Path
) -> None:
    asked = Asked()
    logs = Logs()
    async with http_upstream(world, tmp_path) as url:
        params = world.proxy_params("--upstream-url", url, "--upstream-mode", "legacy", upstream=[])
        async with connect(params, "legacy", logging_callback=logs, **asked.callbacks()) as client:
            answered = await client.call_tool("ask", {"question": "Which city?"})
            await client.call_tool("chatty", {"steps": 1})
    assert answered.content[0].text == "answer: Lisbon"
    assert asked.elicited == ["Which city?"]
    assert ("info", "step 1") in logs.seen
