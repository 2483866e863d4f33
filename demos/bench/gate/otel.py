"""The instrumentation's cost on the allow path: checks with no telemetry provider configured,
interleaved with checks reporting to an OpenTelemetry SDK (a batching span processor with an
exporter that drops, and a metric reader), on the same gate and plans."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from planfence.demos.bench.harness.stats import percentile
from planfence.demos.support import Progress
from planfence.plugins import telemetry
from planfence.plugins.gate import ALLOW, Gate, Policy, ToolCall
from planfence.shared_memory import AsyncStore

from ..harness.owners import REQUESTER
from .cases import Case


def sdk_providers() -> tuple[Any, Any] | None:
    """An SDK tracer and meter provider, or None when the SDK is not installed."""
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )
    except ImportError:
        return None

    class Dropping(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer = TracerProvider()
    tracer.add_span_processor(BatchSpanProcessor(Dropping()))
    return tracer, MeterProvider(metric_readers=[InMemoryMetricReader()])


async def otel_rows(
    store: AsyncStore,
    policy: Policy,
    cases: list[Case],
    repeat: int,
    rows: list[dict[str, Any]],
    notes: list[str],
    progress: Progress,
) -> None:
    providers = sdk_providers()
    if providers is None:
        notes.append("telemetry rows skipped: pip install opentelemetry-sdk")
        return
    gate = Gate(store, policy, agent=REQUESTER)
    try:
        for case in cases:
            samples: dict[str, list[float]] = {"off": [], "on": []}
            for i in range(repeat + max(2, repeat // 10)):
                order = ("off", "on") if i % 2 else ("on", "off")
                for mode in order:
                    telemetry.use(*providers) if mode == "on" else telemetry.use()
                    t0 = time.perf_counter()
                    verdict = await gate.check(ToolCall(case.tool, {}, case.plan))
                    samples[mode].append(time.perf_counter() - t0)
                    if verdict.verdict != ALLOW:
                        raise RuntimeError(f"benchmark plan was not allowed: {verdict.reason}")
                if i == max(2, repeat // 10) - 1:
                    samples = {"off": [], "on": []}
            off, on = (percentile(samples[m], 50) * 1000 for m in ("off", "on"))
            rows.append(
                {
                    "deps": case.deps,
                    "depth": case.depth,
                    "no_provider_p50_ms": round(off, 4),
                    "sdk_provider_p50_ms": round(on, 4),
                    "overhead_p50_ms": round(on - off, 4),
                    "ratio_p50": round(on / off, 3) if off > 0 else None,
                }
            )
            progress.advance(f"telemetry |D(a)|={case.deps} depth {case.depth}")
    finally:
        await gate.aclose()  # the deferred audit writes the allows it queued
        telemetry.use()
        for provider in providers:
            provider.shutdown()
