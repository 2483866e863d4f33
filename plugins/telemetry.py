"""OpenTelemetry spans and metrics for gate and Janus decisions.

Every gate decision is a span `planfence.check {tool}`, a child of the current span (so it nests
under a framework's `execute_tool` span), and every Janus decision a span
`planfence.janus.decide {key}`. Metrics: the counters `planfence.gate.decisions` and
`planfence.janus.decisions`, and the histogram `planfence.gate.duration` (seconds).

Only the OpenTelemetry API is used (`pip install 'planfence[otel]'`). With the API absent, or with
no tracer or meter provider configured, nothing is created: each decision pays one check of the
global providers. `use(tracer_provider, meter_provider)` reports to given providers instead of
the global ones (as OpenTelemetry instrumentors take `tracer_provider=`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Protocol

try:
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import trace as otel_trace
    from opentelemetry.metrics import _internal as otel_metrics_globals
except ImportError:  # the otel extra is not installed: every hook is a no-op
    otel_metrics = None  # type: ignore[assignment]
    otel_trace = None  # type: ignore[assignment]
    otel_metrics_globals = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from planfence.plugins.gate.decision import Verdict

SCOPE = "planfence"
GATE_SPAN = "planfence.check"
JANUS_SPAN = "planfence.janus.decide"
BLOCK = "block"


class Recorder(Protocol):
    """What a traced decision reports before its span ends."""

    def gate(self, verdict: Verdict, seconds: float) -> None: ...

    def janus(self, attributes: Mapping[str, Any], *, deployed: bool, triggered: bool) -> None: ...


class _Nothing:
    def gate(self, verdict: Verdict, seconds: float) -> None:
        pass

    def janus(self, attributes: Mapping[str, Any], *, deployed: bool, triggered: bool) -> None:
        pass


NOTHING = _Nothing()


class _Untraced:
    """The context of a decision with nothing to report to: reused, it costs two calls."""

    def __enter__(self) -> Recorder:
        return NOTHING

    def __exit__(self, *exc: object) -> None:
        return None


UNTRACED = _Untraced()
_chosen: dict[str, Any] = {"tracer": None, "meter": None}


def use(tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Report to these providers instead of the global ones; `use()` goes back to the globals."""
    _chosen["tracer"], _chosen["meter"] = tracer_provider, meter_provider


def _tracer_provider() -> Any:
    return _chosen["tracer"] or otel_trace.get_tracer_provider()


def _meter_provider() -> Any:
    return _chosen["meter"] or otel_metrics.get_meter_provider()


# Providers named by environment variables, which the API's getters load on first use.
_ENV_PROVIDERS = frozenset(
    v for v in ("OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER") if v in os.environ
)


def _quiet() -> bool:
    """Nothing to report to: no tracer and no meter provider. Asked on every check, so it first
    looks at the API's global providers themselves (set once, by `set_*_provider`): the public
    getters look up the environment on each call, which costs more than a repeated check's
    verdict."""
    if otel_trace is None:
        return True
    if (
        _chosen["tracer"] is None
        and _chosen["meter"] is None
        and not _ENV_PROVIDERS
        and getattr(otel_trace, "_TRACER_PROVIDER", False) is None
        and getattr(otel_metrics_globals, "_METER_PROVIDER", False) is None
    ):
        return True
    return not _tracing() and not _metering()


def _tracing() -> bool:
    if otel_trace is None:
        return False
    provider = _tracer_provider()
    return not isinstance(provider, otel_trace.ProxyTracerProvider | otel_trace.NoOpTracerProvider)


def _metering() -> bool:
    if otel_metrics is None:
        return False
    provider = _meter_provider()
    # The API's stand-in before a provider is set is private; it and the no-op record nothing.
    return not isinstance(provider, otel_metrics.NoOpMeterProvider) and not type(
        provider
    ).__name__.startswith("_Proxy")


@lru_cache(maxsize=8)
def _instruments(provider: Any) -> tuple[Any, Any, Any]:
    meter = provider.get_meter(SCOPE)
    return (
        meter.create_counter(
            "planfence.gate.decisions", unit="{decision}", description="gate decisions"
        ),
        meter.create_histogram(
            "planfence.gate.duration", unit="s", description="time to decide one tool call"
        ),
        meter.create_counter(
            "planfence.janus.decisions", unit="{decision}", description="Janus decisions"
        ),
    )


class _Recorder:
    def __init__(self, span: Any, metered: bool) -> None:
        self.span = span
        self.metered = metered

    def gate(self, verdict: Verdict, seconds: float) -> None:
        if self.span is not None:
            self.span.set_attributes(gate_attributes(verdict))
            if verdict.verdict == BLOCK:
                self.span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, verdict.reason))
        if self.metered:
            decisions, duration, _ = _instruments(_meter_provider())
            labels = {"verdict": str(verdict.verdict), "reason": str(verdict.reason)}
            decisions.add(1, {**labels, "tool": verdict.tool})
            duration.record(seconds, {"verdict": labels["verdict"], "tool": verdict.tool})

    def janus(self, attributes: Mapping[str, Any], *, deployed: bool, triggered: bool) -> None:
        if self.span is not None:
            self.span.set_attributes(
                {k: v for k, v in attributes.items() if v is not None}
                | {"planfence.janus.deployed": deployed, "planfence.janus.triggered": triggered}
            )
        if self.metered:
            _, _, janus = _instruments(_meter_provider())
            janus.add(1, {"deployed": deployed, "triggered": triggered})


def gate_attributes(verdict: Verdict) -> dict[str, Any]:
    """The span attributes of one gate decision (empty values left out)."""
    attrs: dict[str, Any] = {
        "gen_ai.tool.name": verdict.tool,
        "planfence.verdict": str(verdict.verdict),
        "planfence.reason": str(verdict.reason),
        "planfence.stale.keys": [s.key for s in verdict.stale],
        "planfence.scope.keys": list(verdict.scope),
    }
    if verdict.agent:
        attrs["gen_ai.agent.name"] = verdict.agent
    if isinstance(verdict.plan, str) and verdict.plan:
        attrs["planfence.plan.id"] = verdict.plan
    if verdict.decision_id is not None:
        attrs["planfence.decision.id"] = verdict.decision_id
    return attrs


@contextmanager
def _traced(name: str, attributes: Mapping[str, Any]) -> Iterator[Recorder]:
    tracing, metered = _tracing(), _metering()
    if not tracing and not metered:
        yield NOTHING
        return
    if not tracing:
        yield _Recorder(None, metered)
        return
    tracer = _tracer_provider().get_tracer(SCOPE)
    with tracer.start_as_current_span(name, attributes=dict(attributes)) as span:
        yield _Recorder(span, metered)


def gate_span(tool: str, agent: str | None) -> Any:
    """A context manager around one gate decision; report it with `.gate(verdict, seconds)`."""
    if _quiet():
        return UNTRACED  # the common case, on every check: no generator, no attributes
    attrs = {"gen_ai.tool.name": tool, "gen_ai.operation.name": "planfence.check"}
    if agent:
        attrs["gen_ai.agent.name"] = agent
    return _traced(f"{GATE_SPAN} {tool}", attrs)


def janus_span(key: str) -> Any:
    """A context manager around one Janus decision; report it with `.janus(...)`."""
    return _traced(f"{JANUS_SPAN} {key}", {"planfence.janus.key": key})
