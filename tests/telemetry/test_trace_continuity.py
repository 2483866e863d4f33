"""A trace crosses the MCP proxy: the proxy continues the W3C context a client sends in `_meta`
(its server span for the request, which the gate's check is a child of), and the upstream
receives the context of the proxy's own span for the forwarded request, not the client's.

The MCP SDK makes both spans and carries the context; this proves the proxy's handling of a call
(the gate included) runs inside them, and that the forwarded `_meta` keeps the proxy's context.
The proxy runs in-process, so its spans reach the in-memory exporter; the upstream is a real
subprocess and writes the `_meta` it received to its effects file."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from otel_helpers import Collected, reset_globals

pytest.importorskip("mcp", reason="pip install 'planfence[mcp]'")

from mcp import Client
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanContext, SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from planfence.adapters.mcp import open_proxy, stdio_upstream
from planfence.plugins import telemetry
from planfence.plugins.gate import Gate, Policy, create_plan
from planfence.shared_memory import open_async_store

UPSTREAM = Path(__file__).resolve().parents[1] / "mcp" / "upstream_server.py"
KEY = "trip/t1/requirements"
POLICY = Policy().declare("book", depends_on=["trip/{trip}/requirements"])


@pytest.fixture(autouse=True)
def fresh_mcp_tracer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The MCP SDK's module-level tracer binds to the first global provider it sees and keeps
    it; each test here gets an unbound one, as a new process would have. No global provider is
    set when it is made (an earlier test in this process may have left one; autouse, this runs
    before the `otel` fixture sets the test's own), so it binds to the test's at first use."""
    import mcp.shared._otel as sdk_otel

    reset_globals()
    monkeypatch.setattr(sdk_otel, "_tracer", trace.get_tracer("mcp-python-sdk"))


async def _proxied_book(tmp_path: Path, client: Any) -> tuple[SpanContext, dict[str, Any]]:
    """One `book` call through an in-process proxy, sent with the W3C context of a client span
    made by `client` (a tracer); the client span's context, and the `_meta` the upstream got."""
    store = await open_async_store("memory://")
    try:
        await store.own(KEY, "planner")
        first = await store.put(KEY, {"destination": "Lisbon"}, author="planner")
        plan = await create_plan(store, author="planner", parents=[first.id])
        effects = tmp_path / "effects.jsonl"
        upstream = stdio_upstream([sys.executable, str(UPSTREAM), "--effects", str(effects)])
        async with (
            open_proxy(Gate(store, POLICY, agent="booker"), upstream) as (_, server),
            Client(server, read_timeout_seconds=60) as session,
        ):
            # The client's span reaches the proxy only through `_meta`, as across processes.
            with client.start_as_current_span("agent turn", kind=SpanKind.CLIENT) as turn:
                carrier: dict[str, str] = {}
                TraceContextTextMapPropagator().inject(carrier)
            meta = {**carrier, "tracestate": "vendor=1", "dev.planfence/plan": plan.id}
            args = {"destination": "Lisbon", "trip": "t1"}
            result = await session.call_tool("book", args, meta=meta)
        assert not result.is_error, result.content
    finally:
        await store.aclose()
    rows = [json.loads(line) for line in effects.read_text().splitlines()]
    [booked] = [r for r in rows if r["event"] == "book"]
    assert booked["meta"]["dev.planfence/plan"] == plan.id
    return turn.get_span_context(), booked["meta"]


async def test_a_proxied_call_continues_the_clients_trace(otel: Collected, tmp_path: Path) -> None:
    client_span, received = await _proxied_book(tmp_path, trace.get_tracer("the-client"))
    spans = otel.spans.get_finished_spans()

    def one(name: str, kind: SpanKind) -> ReadableSpan:
        [span] = [s for s in spans if s.name == name and s.kind is kind]
        assert span.context.trace_id == client_span.trace_id, name
        return span

    # The proxy's span for the request continues the client's; the gate's check is its child.
    served = one("tools/call book", SpanKind.SERVER)
    assert served.parent is not None and served.parent.span_id == client_span.span_id
    assert served.parent.is_remote
    check = one("planfence.check book", SpanKind.INTERNAL)
    assert check.parent is not None and check.parent.span_id == served.context.span_id
    assert dict(check.attributes or {})["planfence.verdict"] == "allow"
    sent = one("MCP send tools/call book", SpanKind.CLIENT)
    assert sent.parent is not None and sent.parent.span_id == served.context.span_id
    assert sent.context.trace_state.get("vendor") == "1"

    # The upstream saw the proxy's span as its parent, not the client's.
    _, trace_id, span_id, _ = received["traceparent"].split("-")
    assert int(trace_id, 16) == client_span.trace_id
    assert int(span_id, 16) == sent.context.span_id
    assert received["tracestate"] == "vendor=1"


async def test_with_planfences_own_provider_the_check_still_joins_the_clients_trace(
    otel: Collected, tmp_path: Path
) -> None:
    """`telemetry.use(provider)` and no global provider: the MCP SDK makes no spans, yet the
    check is a child of the client's span, and the upstream gets the client's context."""
    mine = TracerProvider()
    mine.add_span_processor(SimpleSpanProcessor(otel.spans))
    reset_globals()
    telemetry.use(mine)
    try:
        client_span, received = await _proxied_book(tmp_path, mine.get_tracer("the-client"))
    finally:
        telemetry.use()
        mine.shutdown()
    spans = [s for s in otel.spans.get_finished_spans() if s.name != "agent turn"]
    [check] = spans  # planfence's span only
    assert check.name == "planfence.check book"
    assert check.context.trace_id == client_span.trace_id
    assert check.parent is not None and check.parent.span_id == client_span.span_id
    assert received["traceparent"].split("-")[2] == f"{client_span.span_id:016x}"
