"""The scenario cases, written once for every adapter. Each runs the adapter's agent on a fresh
world and asserts on what the tools did (the recorded side effects), the audit log and the
spans, not only on what the adapter reports.

- (a) current: nothing changed between plan and call: the effect runs once with the planned
  value, and the allow is in the audit log.
- (b) replan: the record changed after the plan: one replan, the effect runs once with the new
  value and never with the old.
- (c) stale again: it changed again after the replan: no effect, `stale_after_replan`.
- (d) control: the freshness-only checker acts on the stale plan (proves (b) can fail).
- (e) no plan: an ungated tool runs without a plan; a gated tool without a plan does not.
- (f) store down: the store fails during the check: no effect, a block with `store_unavailable`.
- (g) fence: inside the tool, the allow's fencing token is `planfence.fence.current()` and
  verifies against the store.
- (h) span: the `planfence.check` span is the child of the framework's own tool span (or, for a
  framework that opens none, of the span the agent was run in; for one whose tool span wraps
  only the function, outside its interception place, the span just before it, in the same parent).

The lifecycle cases (`lifecycle`):

- (i) store down before the plan is stamped: the adapter's store broken from the start, closed
  before the run, or lost between the model's read and the stamp: each time the run ends
  normally, nothing runs, and the model is told `store_unavailable`.
- (j) second run: the same agent and adapter run again after a blocked run: the second run gets
  its own replan.
- (k) framework retries: a malformed call the framework rejects and retries first does not use
  up the replan: the replan and its allow follow, and the run ends normally.
- (l) shown after a refusal: the refusal carries the current value, what the model is shown next
  holds it, and nothing labelled current holds an older one.
- (m) close order: the store closed right after a run, the adapter never closed: closing does
  not hang, the store stays closed, and the run's allow is in the journal.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from planfence.fence import StaleFenceError, verify

from . import lifecycle, tracing
from .checks import CaseFailure, booked, expect, told, verdicts
from .harness import Harness
from .world import BOOK, KEY, NOWHERE, WEATHER, Script, World, freshness_only, unavailable


def _revise(world: World, destination: str) -> Callable[[], Awaitable[Any]]:
    return lambda: world.revise(destination)


async def current(h: Harness, world: World) -> str:
    await h.run(world, Script(), checker=None, plans=True)
    expect(booked(world) == ["Lisbon"], f"effects {booked(world)}, expected one Lisbon booking")
    log = await verdicts(world)
    expect(("allow", "current") in log, f"audit log {log} has no allow of the current plan")
    expect(all(v == "allow" for v, _ in log), f"audit log {log}: a current plan was refused")
    return "booked Lisbon once; allow audited"


async def replan(h: Harness, world: World) -> str:
    script = Script(meanwhile={0: _revise(world, "Porto")})
    await h.run(world, script, checker=None, plans=True)
    expect(booked(world) == ["Porto"], f"effects {booked(world)}, expected one Porto booking")
    log = await verdicts(world)
    expect(
        log == [("replan", "stale_dependencies"), ("allow", "current")],
        f"audit log {log}, expected one replan then one allow",
    )
    return "one replan; booked Porto once, never Lisbon"


async def stale_again(h: Harness, world: World) -> str:
    script = Script(meanwhile={0: _revise(world, "Porto"), 1: _revise(world, "Madrid")})
    await h.run(world, script, checker=None, plans=True)
    expect(booked(world) == [], f"effects {booked(world)}, expected none")
    log = await verdicts(world)
    expect(
        log[:2] == [("replan", "stale_dependencies"), ("block", "stale_after_replan")],
        f"audit log {log}, expected a replan then a stale_after_replan block",
    )
    expect(all(v != "allow" for v, _ in log), f"audit log {log}: a call was allowed")
    return "no effect; blocked stale_after_replan"


async def control(h: Harness, world: World) -> str:
    script = Script(meanwhile={0: _revise(world, "Porto")})
    await h.run(world, script, checker=freshness_only, plans=True)
    expect(
        booked(world) == ["Lisbon"],
        f"effects {booked(world)}: the freshness-only control should book the stale Lisbon",
    )
    return "the control acted on the stale plan (Lisbon)"


async def no_plan(h: Harness, world: World) -> str:
    await h.run(world, Script(tool=WEATHER), checker=None, plans=False)
    weather = world.effects.of(WEATHER)
    expect(len(weather) == 1, f"ungated tool ran {len(weather)} times without a plan, expected 1")
    await h.run(world, Script(tool=BOOK), checker=None, plans=False)
    expect(booked(world) == [], f"effects {booked(world)}: a gated tool ran without a plan")
    log = await verdicts(world)
    expect(bool(log) and all(v == "block" for v, _ in log), f"audit log {log}, expected blocks")
    reasons = sorted({r for _, r in log})
    return f"ungated ran; gated blocked ({', '.join(reasons)})"


async def store_down(h: Harness, world: World) -> str:
    run = await h.run(world, Script(), checker=unavailable, plans=True)
    expect(booked(world) == [], f"effects {booked(world)}: a call ran while the store was down")
    said = told(run)
    expect("store_unavailable" in said, f"the model was told {said!r}, not store_unavailable")
    return "no effect; blocked store_unavailable"


async def fence(h: Harness, world: World) -> str:
    await h.run(world, Script(), checker=None, plans=True)
    effects = world.effects.of(BOOK)
    expect(len(effects) == 1, f"{len(effects)} bookings, expected 1")
    token = effects[0].fence
    expect(token is not None, "inside the tool, planfence.fence.current() was None")
    assert token is not None
    try:
        checked = await verify(token, world.store, tool=BOOK, args=effects[0].args)
    except StaleFenceError as exc:
        raise CaseFailure(f"the tool's token does not verify: {exc}") from None
    head = await world.head()
    expect(checked.heads[KEY].head == head, f"token heads {checked.heads}, store head {head}")
    return "token current() inside the tool; verifies against the store"


async def span(h: Harness, world: World) -> str:
    with tracing.capture() as spans:
        await h.run(world, Script(), checker=None, plans=True)
    checks = [s for s in spans.finished() if s.name == f"planfence.check {BOOK}"]
    expect(len(checks) == 1, f"{len(checks)} planfence.check spans, expected 1")
    parent = spans.parent(checks[0])
    if h.tool_span is not None and not getattr(h, "tool_span_wraps_gate", True):
        return _before_tool_span(spans, checks[0], h.tool_span)
    if h.tool_span is not None:
        expect(
            parent is not None and parent.name.startswith(h.tool_span),
            f"planfence.check's parent is {parent.name if parent else None!r}, "
            f"not the framework's tool span {h.tool_span!r}",
        )
        return f"child of {parent.name!r}" if parent is not None else ""
    expect(
        spans.under_root(checks[0]),
        "planfence.check is not inside the span the agent ran in",
    )
    return "no framework tool span: inside the caller's span"


def _before_tool_span(spans: tracing.Spans, check: Any, tool_span: str) -> str:
    """For a framework whose tool span encloses only the function (its interception place runs
    outside it): the check and that span share a parent, and the check ended before it began."""
    tools = [s for s in spans.finished() if s.name.startswith(tool_span)]
    expect(len(tools) == 1, f"{len(tools)} {tool_span!r} spans, expected 1")
    parent, tool_parent = spans.parent(check), spans.parent(tools[0])
    expect(
        parent is not None
        and tool_parent is not None
        and parent.context.span_id == tool_parent.context.span_id,
        f"planfence.check's parent is {parent.name if parent else None!r}, the tool span's "
        f"{tool_parent.name if tool_parent else None!r}: not the same span",
    )
    expect(check.end_time <= tools[0].start_time, "planfence.check ended after the tool began")
    expect(spans.under_root(check), "planfence.check is not inside the span the agent ran in")
    assert parent is not None
    return f"just before {tools[0].name!r} (it wraps the function only), in {parent.name!r}"


@dataclass(frozen=True)
class Case:
    letter: str
    name: str
    run: Callable[[Harness, World], Awaitable[str]]


CASES: tuple[Case, ...] = (
    Case("a", "current", current),
    Case("b", "replan", replan),
    Case("c", "stale_again", stale_again),
    Case("d", "control", control),
    Case("e", "no_plan", no_plan),
    Case("f", "store_down", store_down),
    Case("g", "fence", fence),
    Case("h", "span", span),
    Case("i", "store_down_before_stamp", lifecycle.store_down_before_stamp),
    Case("j", "second_run", lifecycle.second_run),
    Case("k", "framework_retries", lifecycle.framework_retries),
    Case("l", "shown_after_refusal", lifecycle.shown_after_refusal),
    Case("m", "close_order", lifecycle.close_order),
)

__all__ = ["CASES", "NOWHERE", "Case", "CaseFailure"]
