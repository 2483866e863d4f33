"""Span capture for case (h): an in-memory exporter on the global OpenTelemetry tracer provider
(frameworks report their own spans there), and the run wrapped in a root span of ours."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from planfence.shared_memory.extras import extra_imports

ROOT = "planfence.conformance run"
_state: dict[str, Any] = {}


class Spans:
    """The spans finished during one capture."""

    def __init__(self, exporter: Any, root: Any) -> None:
        self.exporter = exporter
        self.root = root

    def finished(self) -> Sequence[Any]:
        return tuple(self.exporter.get_finished_spans())

    def _by_id(self) -> dict[int, Any]:
        return {s.context.span_id: s for s in self.finished()}

    def parent(self, span: Any) -> Any | None:
        if span.parent is None:
            return None
        return self._by_id().get(span.parent.span_id)

    def under_root(self, span: Any) -> bool:
        """Whether `span` descends from the capture's root span."""
        spans, seen = self._by_id(), set()
        node = span
        while node is not None and node.parent is not None and node.context.span_id not in seen:
            seen.add(node.context.span_id)
            if node.parent.span_id == self.root.context.span_id:
                return True
            node = spans.get(node.parent.span_id)
        return False


def _exporter() -> Any:
    """The suite's exporter on the global tracer provider (set once per process, and again when
    something in the process has since replaced the global provider)."""
    with extra_imports("bench", "the conformance suite's span case"):
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = trace.get_tracer_provider()
    if "exporter" in _state and _state["provider"] is provider:
        return _state["exporter"]
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _state["exporter"] = exporter
    _state["provider"] = provider
    return exporter


@contextmanager
def capture() -> Iterator[Spans]:
    """Collect the spans finished inside the block, which runs inside a root span."""
    exporter = _exporter()
    exporter.clear()
    tracer = _state["provider"].get_tracer("planfence.conformance")
    with tracer.start_as_current_span(ROOT) as root:
        spans = Spans(exporter, root)
        yield spans
