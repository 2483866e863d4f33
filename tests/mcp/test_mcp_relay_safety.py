"""The relay under pressure: a plan that goes stale while the client answers the upstream's
question, messages whose request already finished, clients that hang or go away mid-question,
and subscriptions across client disconnects and upstream restarts.

Real processes throughout: the proxy as a subprocess in front of the test upstream, driven by the
official client. Client mode "legacy" is the 2025-11-25 handshake; the upstream mode is the
proxy's `--upstream-mode` ("auto" reaches the upstream in the 2026-07-28 era, whose questions
arrive as `input_required` results; "legacy" gets them as mid-call requests).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.session import ClientRequestContext
from mcp_helpers import TRIP_KEY, World, connect, http_proxy, plan_meta, refusal, wait_for

from planfence.plugins.gate import find_decisions

GATED_ASK = f'[tools.ask]\ndepends_on = ["{TRIP_KEY}"]'


def _gate_ask(world: World) -> None:
    text = world.policy.read_text()
    assert "[tools.ask]\nungated = true" in text
    world.policy.write_text(text.replace("[tools.ask]\nungated = true", GATED_ASK))


@pytest.mark.parametrize("upstream_mode", ["auto", "legacy"])
async def test_a_plan_gone_stale_while_the_client_answers_is_refused(
    world: World, upstream_mode: str
) -> None:
    _gate_ask(world)

    async def elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        await world.revise({"destination": "Porto"})  # the head moves while the human answers
        return types.ElicitResult(action="accept", content={"answer": "Lisbon"})

    # durable: the journal's order and ids are those of the judgements, asserted below
    params = world.proxy_params("--upstream-mode", upstream_mode, "--audit", "durable")
    async with connect(params, "legacy", elicitation_callback=elicit) as client:
        result = await client.call_tool("ask", {"question": "Where?"}, meta=plan_meta(world.plan))
        body = refusal(result)
        assert body["verdict"] == "replan"
        assert body["reason"] == "stale_dependencies"
        assert [s["key"] for s in body["stale"]] == [TRIP_KEY]
        # The proxy keeps serving.
        echo = await client.call_tool("echo", {"text": "still here"})
        assert echo.content[0].text == "still here"
    assert world.effects_log("asked") == []  # the tool never went on with the answer
    verdicts = [d.verdict for d in await find_decisions(world.store, source="gate", tool="ask")]
    assert verdicts == ["replan", "allow"]  # newest first: the second judgement refused
    assert body["decision_id"] == (await find_decisions(world.store, tool="ask"))[0].id


@pytest.mark.parametrize("upstream_mode", ["auto", "legacy"])
async def test_a_call_still_current_after_the_answer_carries_the_latest_decision(
    world: World, upstream_mode: str
) -> None:
    _gate_ask(world)

    async def elicit(context: ClientRequestContext, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"answer": "Lisbon"})

    # durable: the journal's order and ids are those of the judgements, asserted below
    params = world.proxy_params("--upstream-mode", upstream_mode, "--audit", "durable")
    async with connect(params, "legacy", elicitation_callback=elicit) as client:
        result = await client.call_tool("ask", {"question": "Where?"}, meta=plan_meta(world.plan))
    assert result.is_error is False, result.content
    assert result.content[0].text == "answer: Lisbon"
    decisions = await find_decisions(world.store, source="gate", tool="ask")
    assert [d.verdict for d in decisions] == ["allow", "allow"]  # judged again after the answer
    stamped = result.meta["dev.planfence/decision"]
    assert stamped["verdict"] == "allow"
    assert stamped["decision_id"] == decisions[0].id
    [asked] = world.effects_log("asked")
    # A 2026 upstream runs the tool in a new request after the answer: it carries the token of
    # the latest judgement. A handshake-era upstream asked mid-call, inside the first request.
    sent_with = decisions[0] if upstream_mode == "auto" else decisions[1]
    assert asked["meta"]["dev.planfence/fence"]["decision"] == sent_with.id


async def test_a_client_that_never_answers_gets_a_timeout_not_a_hang(world: World) -> None:
    # A 2026 upstream has already answered `input_required`: nothing upstream times out, so
    # only the proxy's own limit on asking the client ends the call.
    async def never(context: ClientRequestContext, params: Any) -> types.ElicitResult:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    params = world.proxy_params("--upstream-mode", "auto", "--call-timeout", "1")
    async with connect(params, "legacy", elicitation_callback=never) as client:
        with anyio.fail_after(30):  # a generous bound: the point is that the call returns
            result = await client.call_tool("ask", {"question": "Where?"})
        body = refusal(result)
        assert body["error"] == "input_refused"
        assert "did not answer elicitation/create" in body["message"]
        echo = await client.call_tool("echo", {"text": "still here"})
        assert echo.content[0].text == "still here"
    assert world.effects_log("asked") == []


class Notices:
    def __init__(self) -> None:
        self.seen: list[Any] = []

    async def __call__(self, message: Any) -> None:
        if not isinstance(message, Exception | types.LoggingMessageNotification):
            self.seen.append(message)

    def of(self, kind: type) -> list[Any]:
        return [m for m in self.seen if isinstance(m, kind)]


async def test_a_completion_for_an_elicitation_the_client_never_got_goes_nowhere(
    world: World,
) -> None:
    # The upstream announces the completion of a URL elicitation the proxy never relayed: no
    # client asked for it, so no client (not even the one whose call is in flight) gets it.
    notices = Notices()
    params = world.proxy_params("--upstream-mode", "legacy")
    async with connect(params, "legacy", message_handler=notices) as client:
        done = await client.call_tool("complete", {"elicitation_id": "never-asked"})
        assert done.content[0].text == "completed never-asked"
        # A later notice on the same connection proves the one above was not delivered.
        await client.call_tool("grow", {"name": "echo_five"})
        await wait_for(lambda: bool(notices.of(types.ToolListChangedNotification)), "a notice")
    assert notices.of(types.ElicitCompleteNotification) == []


def _subscribe(uri: str) -> types.SubscribeRequest:
    return types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri))


def _unsubscribe(uri: str) -> types.UnsubscribeRequest:
    return types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri))


def _uris(world: World, event: str) -> list[str]:
    return [e["uri"] for e in world.effects_log(event)]


async def test_a_client_that_leaves_releases_its_subscriptions(
    world: World, tmp_path: Path
) -> None:
    uri = "test://greeting"
    async with http_proxy(world, tmp_path, "--upstream-mode", "legacy") as url:
        async with connect(url, "legacy") as first:
            await first.session.send_request(_subscribe(uri), types.EmptyResult)
        # The only client watching the resource is gone: the upstream subscription goes too.
        await wait_for(lambda: _uris(world, "unsubscribe") == [uri], "the upstream unsubscribe")
        async with connect(url, "legacy") as second:
            await second.session.send_request(_subscribe(uri), types.EmptyResult)
            await second.session.send_request(_unsubscribe(uri), types.EmptyResult)
    assert _uris(world, "subscribe") == [uri, uri]
    assert _uris(world, "unsubscribe") == [uri, uri]


async def test_subscriptions_are_renewed_when_the_upstream_restarts(world: World) -> None:
    uri = "test://greeting"
    notices = Notices()
    params = world.proxy_params("--upstream-mode", "legacy")
    async with connect(params, "legacy", message_handler=notices) as client:
        await client.session.send_request(_subscribe(uri), types.EmptyResult)
        crashed = await client.call_tool("crash", {"tag": "c1"})
        assert crashed.is_error is True
        # The next call starts a new upstream, which the proxy subscribes again.
        again = await client.call_tool("echo", {"text": "back"})
        assert again.content[0].text == "back"
        await wait_for(lambda: len(world.effects_log("subscribe")) == 2, "the renewed subscription")
        await client.session.send_request(_unsubscribe(uri), types.EmptyResult)
    assert len(world.effects_log("started")) == 2
    assert _uris(world, "subscribe") == [uri, uri]
    assert _uris(world, "unsubscribe") == [uri]
