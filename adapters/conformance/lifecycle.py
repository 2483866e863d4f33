"""The lifecycle cases, (i) to (m): the store down before a plan is stamped, a second run, the
framework's own retries, what the model sees after a refusal, and close order. Each asserts on
the effects, the journal and what the model was shown, as the other cases do (see `cases`)."""

from __future__ import annotations

import asyncio
import gc
import re
from collections.abc import Awaitable, Callable
from typing import Any

from planfence.shared_memory import StoreUnavailableError, open_async_store

from .checks import CaseFailure, booked, expect, told, verdicts
from .harness import Harness, Run
from .world import KEY, Outage, Script, World, destinations

RUN_TIMEOUT = 60.0
CLOSE_TIMEOUT = 10.0
REPLAN = ("replan", "stale_dependencies")
ALLOW = ("allow", "current")
_CURRENT = re.compile(r"\bcurrent\b", re.IGNORECASE)


def _revise(world: World, destination: str) -> Callable[[], Awaitable[Any]]:
    return lambda: world.revise(destination)


async def _run(h: Harness, world: World, script: Script, what: str, **options: Any) -> Run:
    """The harness's run; an exception out of it, or a run that does not end, fails the case."""
    try:
        return await asyncio.wait_for(
            h.run(world, script, checker=None, plans=True, **options), RUN_TIMEOUT
        )
    except asyncio.TimeoutError:
        raise CaseFailure(f"{what}: the run did not end in {RUN_TIMEOUT:.0f} s") from None
    except CaseFailure:
        raise
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise CaseFailure(f"{what}: the run raised {type(exc).__name__}: {first}") from None


async def _refused_unavailable(h: Harness, world: World, script: Script, what: str) -> None:
    run = await _run(h, world, script, what)
    expect(booked(world) == [], f"{what}: effects {booked(world)}: a call ran")
    said = told(run)
    expect("store_unavailable" in said, f"{what}: the model was told {said!r}")
    log = await verdicts(world)
    expect(ALLOW not in log, f"{what}: audit log {log} has an allow")


async def store_down_before_stamp(h: Harness, world: World) -> str:
    broken = Outage(world.store)
    broken.down = True
    await _refused_unavailable(h, world.with_store(broken), Script(), "broken from the start")

    closed = await open_async_store(world.url)
    await closed.aclose()
    await _refused_unavailable(h, world.with_store(closed), Script(), "closed before the run")

    lost = Outage(world.store)

    async def go_down() -> None:
        lost.down = True

    script = Script(meanwhile={0: go_down})
    await _refused_unavailable(h, world.with_store(lost), script, "lost after the model's read")
    return "broken, closed, lost after the read: store_unavailable each time, nothing ran"


async def second_run(h: Harness, world: World) -> str:
    script = Script(
        meanwhile={0: _revise(world, "Porto"), 1: _revise(world, "Madrid")},
        later=[{0: _revise(world, "Rome")}],
    )
    await _run(h, world, script, "two runs", runs=2)
    log = await verdicts(world)
    first = [REPLAN, ("block", "stale_after_replan")]
    expect(log[:2] == first, f"audit log {log}: the first run was not replanned then blocked")
    expect(
        log[2:] == [REPLAN, ALLOW],
        f"audit log {log}: the second run did not get its own replan (expected one replan "
        "then one allow after the first run's block)",
    )
    expect(booked(world) == ["Rome"], f"effects {booked(world)}, expected one Rome booking")
    return "blocked run, then a run of its own: one replan, booked Rome"


async def framework_retries(h: Harness, world: World) -> str:
    script = Script(meanwhile={1: _revise(world, "Porto")}, malformed=1, max_calls=4)
    await _run(h, world, script, "a malformed call, then a stale plan")
    log = await verdicts(world)
    expect(booked(world) == ["Porto"], f"effects {booked(world)}, expected one Porto booking")
    # (A deferred allow is journalled after the refusals that follow it: order is not checked.)
    expect(REPLAN in log and ALLOW in log, f"audit log {log}: no replan and allow")
    expect(all(v != "block" for v, _ in log), f"audit log {log}: a call was blocked")
    return "framework retry, then planfence's own replan: booked Porto"


async def shown_after_refusal(h: Harness, world: World) -> str:
    script = Script(meanwhile={0: _revise(world, "Porto")})
    run = await _run(h, world, script, "a replan")
    expect(booked(world) == ["Porto"], f"effects {booked(world)}, expected one Porto booking")
    refusal = run.told[0] if run.told else ""
    named = destinations(refusal)
    expect(
        "Porto" in named and "Lisbon" not in named,
        f"the refusal does not carry the current value (Porto): {refusal!r}",
    )
    expect(len(script.shown) > 1, "the model was not asked again after the refusal")
    after = script.shown[1]
    expect(
        any("Porto" in destinations(t) for t in after),
        f"what the model was shown after the refusal holds no current value: {after!r}",
    )
    stale = [t for t in after if _CURRENT.search(t) and set(destinations(t)) - {"Porto"}]
    expect(not stale, f"shown as current after the refusal, but not current: {stale!r}")
    return "the refusal and the next view hold Porto; nothing older labelled current"


async def close_order(h: Harness, world: World) -> str:
    store = await open_async_store(world.url)
    try:
        await _run(h, world.with_store(store), Script(), "a run", close=False)
    finally:
        try:
            await asyncio.wait_for(store.aclose(), CLOSE_TIMEOUT)
        except asyncio.TimeoutError:
            raise CaseFailure(f"closing the store hung ({CLOSE_TIMEOUT:.0f} s)") from None
    gc.collect()  # whatever the unclosed adapter leaves behind is finalised now
    try:
        await store.heads([KEY])
    except StoreUnavailableError:
        pass
    else:
        raise CaseFailure("the store answered after it was closed: it reopened")
    expect(booked(world) == ["Lisbon"], f"effects {booked(world)}, expected one Lisbon booking")
    log = await verdicts(world)
    expect(
        ALLOW in log,
        f"audit log {log}: the run's allow was not written (the store was closed before the "
        "adapter, which was never closed: closing the store must write what its gates queued)",
    )
    return "store closed first, adapter never: no hang, stays closed, the allow is written"


__all__ = [
    "close_order",
    "framework_retries",
    "second_run",
    "shown_after_refusal",
    "store_down_before_stamp",
]
