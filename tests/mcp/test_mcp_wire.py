"""The proxy on the wire: every message kind the two protocol eras define, batches, methods it
does not know and malformed input, each sent as bytes, and where each one went.

The proxy runs in-process between a client that writes and reads bytes and an upstream link
that records every byte it is given. A client's message is forwarded byte for byte (the same
bytes reach the upstream, and the upstream's answer reaches the client as it came), gated (the
gate judged it: an allowed call goes upstream with its fencing token, a refused one never does),
answered by the proxy (the handshake and the client's own connection state), or refused (the
proxy answers with an error and nothing reaches the upstream). The upstream's own requests and
notifications go to the client byte for byte. Client messages are sent with spaces after `,` and
`:`, which the proxy's own encoding never writes, so a re-encoded message cannot pass as forwarded.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp_types.methods import CLIENT_NOTIFICATIONS, CLIENT_REQUESTS, SERVER_NOTIFICATIONS

from planfence.adapters.mcp.proxy import PlanfenceProxy
from planfence.adapters.mcp.upstream import Upstream
from planfence.plugins.gate import Gate, Policy, create_plan, find_decisions
from planfence.shared_memory import AsyncStore, open_async_store

LEGACY, MODERN = "2025-11-25", "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "wire-test", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
KEY = "trip/t1/requirements"
POLICY = Policy().declare("book", depends_on=[KEY]).declare("echo", ungated=True)
# What the proxy does with each client request, by era (tasks/* come from the 2025-11-25
# schema, which the SDK's tables leave out; a task-augmented tools/call is gated like any other).
READS = {"tools/list", "resources/list", "resources/templates/list", "resources/read"}
READS |= {"prompts/list", "prompts/get", "completion/complete"}
FORWARDED = {LEGACY: READS | {"ping"}, MODERN: READS}
TASKS = ("tasks/get", "tasks/result", "tasks/list", "tasks/cancel")
ANSWERED = {
    LEGACY: {"initialize", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"},
    MODERN: {"server/discover", "subscriptions/listen"},
}
PARAMS: dict[str, dict[str, Any]] = {
    "resources/read": {"uri": "test://a"},
    "prompts/get": {"name": "p", "arguments": {}},
    "completion/complete": {"ref": {"type": "ref/prompt", "name": "p"}, "argument": {}},
    "resources/subscribe": {"uri": "test://a"},
    "resources/unsubscribe": {"uri": "test://a"},
    "logging/setLevel": {"level": "info"},
    "initialize": {"protocolVersion": LEGACY, "capabilities": {"roots": {}}, "clientInfo": {}},
    "subscriptions/listen": {"notifications": {"toolsListChanged": True}},
    "tasks/get": {"taskId": "t1"},
    "tasks/result": {"taskId": "t1"},
    "tasks/cancel": {"taskId": "t1"},
}


def spaced(message: Any) -> bytes:
    """How the test's client writes: not the proxy's compact encoding."""
    return json.dumps(message).encode()


def request(
    msg_id: Any, method: str, era: str, params: dict[str, Any] | None = None, **meta: Any
) -> Any:
    params = dict(params if params is not None else PARAMS.get(method, {}))
    if era == MODERN:
        meta = {**meta, **ENVELOPE}
    if meta:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}


def plan(wire: Wire) -> dict[str, Any]:
    return {"dev.planfence/plan": wire.plan}


BOOK = {"name": "book", "arguments": {"trip": "t1"}}


class Link:
    """An upstream transport that records what it is given and answers the handshake (and the
    proxy's own requests) itself; the test plays the upstream for everything else."""

    def __init__(self, upstream: Upstream, era: str) -> None:
        self.upstream, self.era = upstream, era
        self.alive = False
        self.sent: list[bytes] = []  # what reached the upstream, client messages only
        self.own: list[dict[str, Any]] = []  # the proxy's own requests and notifications

    async def start(self) -> None:
        self.alive = True

    def send(self, message: dict[str, Any], raw: bytes | None, related: Any) -> None:
        msg_id = message.get("id")
        if isinstance(msg_id, str) and msg_id.startswith("planfence-") and "method" in message:
            self.own.append(message)
            self.upstream.deliver(json.dumps(self._own_answer(message)).encode())
        elif message.get("method") == "notifications/initialized":
            self.own.append(message)
        else:
            self.sent.append(raw if raw is not None else json.dumps(message).encode())

    def _own_answer(self, message: dict[str, Any]) -> dict[str, Any]:
        method, msg_id = message["method"], message["id"]
        caps = {"tools": {"listChanged": True}, "resources": {"subscribe": True}, "logging": {}}
        if method == "server/discover":
            if self.era == LEGACY:
                return {"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32601, "message": "no"}}
            result = {"supportedVersions": [MODERN], "capabilities": caps}
            return {"jsonrpc": "2.0", "id": msg_id, "result": result}
        if method == "initialize":
            result = {"protocolVersion": LEGACY, "capabilities": caps, "serverInfo": {"name": "up"}}
            return {"jsonrpc": "2.0", "id": msg_id, "result": result}
        if method == "tools/list":
            return {"jsonrpc": "2.0", "id": msg_id, "result": {"tools": []}}
        return {"jsonrpc": "2.0", "id": msg_id, "result": {}}

    def abort(self, upstream_id: Any) -> bool:
        return False

    def handshake_done(self, version: str) -> None:
        return None

    async def close(self) -> None:
        self.alive = False


@dataclass
class Wire:
    proxy: PlanfenceProxy
    link: Link
    store: AsyncStore
    plan: str
    era: str
    got: list[tuple[bytes, bool]] = field(default_factory=list)
    peer: Any = None

    def send(self, message: Any) -> bytes:
        data = message if isinstance(message, bytes) else spaced(message)
        self.proxy.receive(self.peer, data)
        return data

    def answers(self) -> list[Any]:
        return [json.loads(data) for data, final in self.got if final and data]

    def last(self) -> Any:
        return json.loads(self.got[-1][0])

    async def settle(self, until: Callable[[], bool] = lambda: False) -> None:
        for _ in range(200):
            await asyncio.sleep(0)
            if until():
                return
        await asyncio.sleep(0.01)

    def upstream_says(self, message: Any) -> bytes:
        data = spaced(message)
        self.proxy.upstream.deliver(data)
        return data


async def _wire(upstream_era: str, client_era: str) -> AsyncIterator[Wire]:
    store = await open_async_store("memory://")
    await store.own(KEY, "planner")
    first = await store.put(KEY, {"destination": "Lisbon"}, author="planner")
    plan = (await create_plan(store, author="planner", parents=[first.id])).id
    gate = Gate(store, POLICY, audit="durable")

    class Recorded(Upstream):
        def _make_link(self) -> Any:
            self.recording = Link(self, upstream_era)
            return self.recording

    upstream = Recorded("http://upstream.test/mcp", call_timeout=5, request_timeout=5)
    proxy = PlanfenceProxy(gate, upstream, single_client=True)
    await upstream.ensure()
    wire = Wire(proxy, upstream.recording, store, plan, client_era)
    wire.peer = proxy.connect(lambda data, call, final: wire.got.append((data, final)))
    if client_era == LEGACY:
        wire.send(request(0, "initialize", LEGACY))
        wire.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        wire.got.clear()
    try:
        yield wire
    finally:
        await proxy.aclose()
        await upstream.aclose()
        await gate.aclose()
        await store.aclose()


@pytest.fixture(params=[LEGACY, MODERN], ids=["handshake-era", "2026-era"])
async def wire(request: pytest.FixtureRequest) -> AsyncIterator[Wire]:
    async for made in _wire(request.param, request.param):
        yield made


def test_the_lists_cover_every_method_the_eras_define() -> None:
    for era in (LEGACY, MODERN):
        defined = {method for method, version in CLIENT_REQUESTS if version == era}
        assert defined == FORWARDED[era] | ANSWERED[era] | {"tools/call"}, era


async def test_harmless_requests_are_forwarded_byte_for_byte_both_ways(wire: Wire) -> None:
    for n, method in enumerate(sorted(FORWARDED[wire.era]) + list(TASKS * (wire.era == LEGACY))):
        sent = wire.send(request(100 + n, method, wire.era))
        await wire.settle(lambda: bool(wire.link.sent))
        assert wire.link.sent.pop() == sent, method
        back = wire.upstream_says({"jsonrpc": "2.0", "id": 100 + n, "result": {"x": [1, 2]}})
        assert wire.got.pop() == (back, True), method
    assert wire.link.sent == []


async def test_the_proxy_answers_the_handshake_and_the_connection_state_itself(wire: Wire) -> None:
    for n, method in enumerate(sorted(ANSWERED[wire.era] - {"subscriptions/listen"})):
        wire.got.clear()
        wire.send(request(200 + n, method, wire.era))
        await wire.settle(lambda: bool(wire.got) and wire.got[-1][1])
        answer = wire.last()
        assert answer["id"] == 200 + n and "result" in answer, (method, answer)
    if wire.era == MODERN:
        wire.send(request(299, "subscriptions/listen", MODERN))
        ack = wire.last()
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 299
    assert wire.link.sent == []  # none of them reached the upstream as it came


async def test_every_tool_call_is_gated(wire: Wire) -> None:
    allowed = request(1, "tools/call", wire.era, BOOK, **plan(wire))
    refused = request(2, "tools/call", wire.era, BOOK)
    undeclared = request(3, "tools/call", wire.era, {"name": "ship", "arguments": {}})
    task = request(4, "tools/call", wire.era, {"name": "book", "arguments": {}, "task": {"ttl": 9}})
    for message in (allowed, refused, undeclared, task):
        wire.send(message)
    await wire.settle(lambda: len(wire.link.sent) >= 1 and len(wire.answers()) >= 3)
    [forwarded] = wire.link.sent
    went = json.loads(forwarded)
    assert went["id"] == 1 and went["params"]["name"] == "book"
    assert went["params"]["_meta"]["dev.planfence/fence"]["tool"] == "book"
    reasons = {
        a["id"]: a["result"]["_meta"]["dev.planfence/refusal"]["planfence"]["reason"]
        for a in wire.answers()
    }
    assert reasons == {2: "missing_plan", 3: "undeclared_tool", 4: "missing_plan"}
    wire.upstream_says({"jsonrpc": "2.0", "id": 1, "result": {"content": []}})
    await wire.settle(lambda: any(a["id"] == 1 for a in wire.answers()))
    [ok] = [a for a in wire.answers() if a["id"] == 1]
    assert ok["result"]["_meta"]["dev.planfence/decision"]["verdict"] == "allow"
    judged = await find_decisions(wire.store, source="gate", tool=None, limit=10)
    assert sorted(d.reason for d in judged) == [
        "current",
        "missing_plan",
        "missing_plan",
        "undeclared_tool",
    ]


UNKNOWN = ["tools/run", "tools/call/batch", "x-acme/execute", "sampling/createMessage", "rpc.x"]


async def test_methods_the_proxy_cannot_classify_are_refused(wire: Wire) -> None:
    for n, method in enumerate(UNKNOWN):
        wire.send(request(300 + n, method, wire.era, {"name": "book"}))
    wire.send({"jsonrpc": "2.0", "method": "notifications/acme/run", "params": {}})
    assert [a["error"]["code"] for a in wire.answers()[-len(UNKNOWN) :]] == [-32601] * len(UNKNOWN)
    await wire.settle()
    assert wire.link.sent == []


MALFORMED: list[tuple[bytes, int, Any]] = [
    (b"not json", -32700, None),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call"', -32700, None),
    (b"[]", -32600, None),
    (b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}', -32600, None),
    (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}', -32600, None),
    (b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', -32600, None),
    (b'{"jsonrpc": "2.0", "id": 7, "method": 5}', -32600, 7),
    (b'{"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": [1]}', -32600, 8),
    (b'{"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": 3}}', -32602, 9),
    (b'{"jsonrpc": "2.0", "id": 10}', -32600, None),
    (b'"tools/call"', -32600, None),
]


async def test_malformed_input_is_answered_by_the_proxy_never_forwarded(wire: Wire) -> None:
    for data, code, msg_id in MALFORMED:
        wire.got.clear()
        wire.send(data)
        await wire.settle(lambda: bool(wire.got))
        [(answer, final)] = wire.got
        body = json.loads(answer)
        assert final and (body["error"]["code"], body["id"]) == (code, msg_id), data
    assert wire.link.sent == []


async def test_a_batch_is_routed_one_message_at_a_time_and_answered_as_one(wire: Wire) -> None:
    call = request(1, "tools/call", wire.era, BOOK, **plan(wire))
    listing = request(2, "tools/list", wire.era)
    refused = request(3, "tools/call", wire.era, BOOK)
    unknown = request(4, "x-acme/run", wire.era)
    note = {"jsonrpc": "2.0", "method": "notifications/acme"}
    wire.send([call, listing, refused, unknown, note, {"jsonrpc": "2.0", "id": 5}])
    await wire.settle(lambda: len(wire.link.sent) == 2)
    went = sorted(json.loads(d)["id"] for d in wire.link.sent)
    assert went == [1, 2]  # the allowed call and the listing, and nothing else
    assert wire.got == []  # the batch is answered as one, when every answer is in
    wire.upstream_says({"jsonrpc": "2.0", "id": 2, "result": {"tools": []}})
    wire.upstream_says({"jsonrpc": "2.0", "id": 1, "result": {"content": []}})
    await wire.settle(lambda: bool(wire.got))
    [(data, final)] = wire.got
    answers = {a.get("id"): a for a in json.loads(data)}
    assert final and set(answers) == {1, 2, 3, 4, None}
    assert answers[1]["result"]["_meta"]["dev.planfence/decision"]["verdict"] == "allow"
    assert answers[3]["result"]["isError"] is True
    assert answers[4]["error"]["code"] == -32601 and answers[None]["error"]["code"] == -32600


async def test_client_notifications(wire: Wire) -> None:
    defined = {m for m, v in CLIENT_NOTIFICATIONS if v == wire.era}
    slow = request(9, "tools/list", wire.era)
    wire.send(slow)
    await wire.settle(lambda: bool(wire.link.sent))
    wire.link.sent.clear()
    passed = {
        "notifications/cancelled": {"requestId": 9, "reason": "no longer needed"},
        "notifications/progress": {"progressToken": "up-1", "progress": 1},
        "notifications/roots/list_changed": {},
    }
    for method in sorted(defined - {"notifications/initialized"}):
        sent = wire.send({"jsonrpc": "2.0", "method": method, "params": passed[method]})
        assert wire.link.sent.pop() == sent, method
    wire.send({"jsonrpc": "2.0", "method": "notifications/acme/run", "params": {}})
    assert wire.link.sent == []
    wire.upstream_says({"jsonrpc": "2.0", "id": 9, "result": {"tools": []}})
    assert wire.got == []  # the cancelled request is not answered


async def test_the_upstreams_requests_and_notifications_reach_the_client_as_they_came(
    wire: Wire,
) -> None:
    wire.send(request(5, "tools/call", wire.era, {"name": "echo"}, progressToken=5))
    await wire.settle(lambda: bool(wire.link.sent))
    assert json.loads(wire.link.sent.pop())["params"]["_meta"]["progressToken"] == 5
    wire.got.clear()
    notices: dict[str, dict[str, Any]] = {
        "notifications/progress": {"progressToken": 5, "progress": 1, "total": 2},
        "notifications/message": {"level": "error", "data": "oops"},
    }
    if wire.era == LEGACY:
        for ask in ("roots/list", "sampling/createMessage", "elicitation/create"):
            wire.got.clear()
            params = {"messages": [], "maxTokens": 1} if ask.startswith("sampling") else {}
            asked = wire.upstream_says(
                {"jsonrpc": "2.0", "id": "q1", "method": ask, "params": params}
            )
            await wire.settle(lambda: bool(wire.got))
            if ask == "roots/list":  # the client declared roots: asked as it came
                assert wire.got == [(asked, False)]
                reply = wire.send({"jsonrpc": "2.0", "id": "q1", "result": {"roots": []}})
                await wire.settle(lambda: bool(wire.link.sent))
                assert wire.link.sent.pop() == reply
            else:  # it did not declare sampling or elicitation: the proxy refuses for it
                assert wire.got == []
                await wire.settle(lambda: bool(wire.link.sent))
                refused = json.loads(wire.link.sent.pop())
                assert refused["id"] == "q1" and "not supported" in refused["error"]["message"]
        wire.upstream_says({"jsonrpc": "2.0", "id": "p1", "method": "ping"})
        await wire.settle(lambda: bool(wire.link.sent))
        assert json.loads(wire.link.sent.pop()) == {"jsonrpc": "2.0", "id": "p1", "result": {}}
        wire.got.clear()
    else:
        notices["notifications/message"] = {"level": "error", "data": "not opted in"}
    for method, params in notices.items():
        data = wire.upstream_says({"jsonrpc": "2.0", "method": method, "params": params})
        if wire.era == LEGACY or method == "notifications/progress":
            assert wire.got.pop() == (data, False), method
    assert wire.got == []  # a 2026-era request that did not opt in gets no logs


async def test_change_notices_reach_every_client_in_its_era(wire: Wire) -> None:
    defined = {m for m, v in SERVER_NOTIFICATIONS if v == wire.era and "list_changed" in m}
    if wire.era == MODERN:
        wire.send(request(7, "subscriptions/listen", MODERN, {"notifications": {
            "toolsListChanged": True, "promptsListChanged": True, "resourcesListChanged": True,
        }}))  # fmt: skip
    wire.got.clear()
    for method in sorted(defined):
        data = wire.upstream_says({"jsonrpc": "2.0", "method": method})
        [(delivered, _)] = wire.got
        wire.got.clear()
        if wire.era == LEGACY:
            assert delivered == data  # as it came
        else:  # on the client's listen stream, tagged with it
            event = json.loads(delivered)
            assert event["method"] == method
            assert event["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 7


async def test_between_eras_only_the_envelope_changes() -> None:
    async for old in _wire(MODERN, LEGACY):  # a handshake-era client, a 2026-era upstream
        old.send(request(1, "tools/list", LEGACY, {"cursor": "c"}))
        went = json.loads(old.link.sent.pop())
        assert went["params"]["cursor"] == "c"
        assert went["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == MODERN
        listed = {"tools": [], "ttlMs": 0, "resultType": "complete"}
        old.upstream_says({"jsonrpc": "2.0", "id": 1, "result": listed})
        assert old.last() == {"jsonrpc": "2.0", "id": 1, "result": {"tools": []}}
    async for new in _wire(LEGACY, MODERN):  # and the other way round
        new.send(request(2, "prompts/list", MODERN))
        assert json.loads(new.link.sent.pop())["params"] == {}
        new.upstream_says({"jsonrpc": "2.0", "id": 2, "result": {"prompts": []}})
        assert new.last()["result"]["resultType"] == "complete"


KNOWN = {m for m, _ in CLIENT_REQUESTS} | {m for m, _ in CLIENT_NOTIFICATIONS} | set(TASKS)
KNOWN.add("notifications/tasks/status")


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    method=st.text(min_size=1, max_size=30).filter(lambda m: m not in KNOWN),
    params=st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=8), max_size=3),
)
async def test_no_method_the_proxy_does_not_know_ever_reaches_the_upstream(
    wire: Wire, method: str, params: dict[str, Any]
) -> None:
    wire.got.clear()
    wire.send({"jsonrpc": "2.0", "id": "h", "method": method, "params": params})
    wire.send({"jsonrpc": "2.0", "method": method, "params": params})
    await wire.settle()
    assert wire.link.sent == []
    [(answer, final)] = wire.got
    assert final and json.loads(answer)["error"]["code"] == -32601
