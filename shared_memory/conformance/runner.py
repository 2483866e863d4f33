"""Running one conformance check: the store it gets, its context, and a `raises` helper."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..model import KeyState
from ..records import DEFAULT_LIMITS, StoreLimits
from ..store import AsyncStore

E = TypeVar("E", bound=BaseException)
TAMPER = "tamper"
TAMPER_HEADS = "tamper_heads"
StoreFactory = Callable[[StoreLimits], AsyncStore]
"""Builds a store (not yet set up) on the test's place, with the given limits."""


class CheckSkipped(Exception):
    """A check that needs a capability the backend does not declare."""


@dataclass(frozen=True)
class Context:
    factory: StoreFactory
    capabilities: frozenset[str]

    def can(self, capability: str) -> bool:
        return capability in self.capabilities

    def require(self, capability: str) -> None:
        if capability not in self.capabilities:
            raise CheckSkipped(f"the backend does not declare {capability!r}")

    @asynccontextmanager
    async def open(self, limits: StoreLimits = DEFAULT_LIMITS) -> AsyncIterator[AsyncStore]:
        store = self.factory(limits)
        await store.setup()
        try:
            yield store
        finally:
            await store.aclose()

    async def tamper(
        self, store: AsyncStore, record_id: str, fields: Mapping[str, Any] | None
    ) -> None:
        self.require(TAMPER)
        await store._tamper_record(record_id, fields)  # type: ignore[attr-defined]

    async def tamper_head(self, store: AsyncStore, state: KeyState) -> None:
        self.require(TAMPER_HEADS)
        await store._tamper_head(state)  # type: ignore[attr-defined]


Check = Callable[[AsyncStore, Context], Awaitable[None]]


async def run_check(
    check: Check, factory: StoreFactory, capabilities: Collection[str] = ()
) -> bool:
    """Run one check on a fresh store from `factory`; False when it was skipped for want of a
    capability (it raises `AssertionError` or the store's error when it fails)."""
    ctx = Context(factory, frozenset(capabilities))
    try:
        async with ctx.open() as store:
            await check(store, ctx)
    except CheckSkipped:
        return False
    return True


class Caught(Generic[E]):
    """What `raises` caught (read `value` after the block)."""

    def __init__(self) -> None:
        self._value: E | None = None

    @property
    def value(self) -> E:
        if self._value is None:
            raise AssertionError("read before the block raised")
        return self._value


@contextmanager
def raises(kind: type[E], match: str | None = None) -> Iterator[Caught[E]]:
    """Like `pytest.raises`, without pytest: the block must raise `kind` (and mention `match`)."""
    caught: Caught[E] = Caught()
    try:
        yield caught
    except kind as exc:
        if match is not None and match not in str(exc):
            raise AssertionError(f"{type(exc).__name__}({exc!s}) does not say {match!r}") from exc
        caught._value = exc
        return
    raise AssertionError(f"did not raise {kind.__name__}")
