"""The proxy's part in a W3C trace, for the calls it judges.

A client's trace context in a `tools/call`'s `_meta` (`traceparent`, `tracestate`) is continued:
with a global tracer provider, the proxy makes the spans the MCP SDK makes for a server and a
client (`tools/call {tool}`, the gate's check its child, and `MCP send tools/call {tool}`), and
the upstream receives the context of the proxy's own span; with only planfence's own provider
(`telemetry.use`), the check is a child of the client's span and the context goes upstream as
the client sent it. Other messages pass with their context untouched. With nothing to report
to, this costs one check per call.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from planfence.plugins import telemetry


def quiet() -> bool:
    """Nothing to report to (the common case): no span is made or continued."""
    return bool(telemetry._quiet())


def _global() -> bool:
    """A global tracer provider is set: the spans of MCP servers and clients go there."""
    try:
        from opentelemetry import trace
    except ImportError:
        return False
    unset = getattr(trace, "_TRACER_PROVIDER", None) is None
    if unset and "OTEL_PYTHON_TRACER_PROVIDER" not in os.environ:
        return False
    provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


@contextmanager
def served(tool: str, meta: dict[str, Any]) -> Iterator[None]:
    """Around the whole handling of one `tools/call` (the gate's check included)."""
    if telemetry._quiet():
        yield
        return
    from opentelemetry import context, propagate

    parent = propagate.extract(meta) if "traceparent" in meta else None
    if _global():
        from mcp.shared._otel import otel_span
        from opentelemetry.trace import SpanKind

        attributes = {
            "mcp.method.name": "tools/call",
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool,
        }
        with otel_span(
            f"tools/call {tool}",
            kind=SpanKind.SERVER,
            attributes=attributes,
            context=parent,
            record_exception=False,
            set_status_on_exception=False,
        ):
            yield
    elif parent is not None:
        token = context.attach(parent)
        try:
            yield
        finally:
            context.detach(token)
    else:
        yield


@contextmanager
def sending(tool: str, params: dict[str, Any]) -> Iterator[None]:
    """Around forwarding a judged call: its span's context replaces the client's in its
    `params._meta`."""
    if telemetry._quiet() or not _global():
        yield
        return
    from mcp.shared._otel import inject_trace_context, otel_span
    from opentelemetry.trace import SpanKind

    attributes = {"mcp.method.name": "tools/call"}
    with otel_span(f"MCP send tools/call {tool}", kind=SpanKind.CLIENT, attributes=attributes):
        meta = params.get("_meta")
        params["_meta"] = meta = dict(meta) if isinstance(meta, dict) else {}
        inject_trace_context(meta)
        yield
