"""The OpenTelemetry SDK's in-memory exporter and metric reader, installed as the global
providers for one test and removed afterwards (the API allows setting them once per process, so
the fixture resets its private once-flags, as OpenTelemetry's own tests do)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="pip install opentelemetry-sdk")

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.util._once import Once


@dataclass
class Collected:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader

    def finished(self, prefix: str = "planfence.") -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.name.startswith(prefix)]

    def points(self, name: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        found = []
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found


def reset_globals() -> None:
    trace._TRACER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    trace._TRACER_PROVIDER = None  # type: ignore[attr-defined]
    metrics._internal._METER_PROVIDER_SET_ONCE = Once()  # type: ignore[attr-defined]
    metrics._internal._METER_PROVIDER = None  # type: ignore[attr-defined]


def collected() -> Iterator[Collected]:
    """Install in-memory SDK providers as the global ones for the duration."""
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    meters = MeterProvider(metric_readers=[reader])
    reset_globals()
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(meters)
    try:
        yield Collected(spans, reader)
    finally:
        provider.shutdown()
        meters.shutdown()
        reset_globals()
