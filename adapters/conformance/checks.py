"""What the cases observe and how they fail: the bookings made, the gate's decisions, what the
model was told."""

from __future__ import annotations

from .harness import Run
from .world import BOOK, World


class CaseFailure(AssertionError):
    """A case's expectation did not hold; the message says what was seen instead."""


def expect(ok: bool, message: str) -> None:
    if not ok:
        raise CaseFailure(message)


def booked(world: World) -> list[str]:
    return [e.args.get("destination", "?") for e in world.effects.of(BOOK)]


async def verdicts(world: World, tool: str = BOOK) -> list[tuple[str, str]]:
    """(verdict, reason) of the gate's decisions on `tool`, oldest first."""
    return [(v, r) for t, v, r in await world.gate_log() if t == tool]


def told(run: Run) -> str:
    return "\n".join(run.told)


__all__ = ["CaseFailure", "booked", "expect", "told", "verdicts"]
