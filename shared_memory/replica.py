"""A replica: an agent's local copy of public records and heads, kept fresh from the change feed.

It models an agent whose local state is current. Being current is not the same as acting on a
current plan: that is what the gate checks.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable

from .model import Change, KeyState
from .records import Record
from .store import AsyncStore


class Replica:
    def __init__(self, store: AsyncStore, *, prefix: str = "") -> None:
        self.store = store
        self.prefix = prefix
        self.seq = 0
        self.states: dict[str, KeyState] = {}
        self.records: dict[str, Record] = {}
        self.applied = 0
        self._listeners: list[Callable[[Change], None]] = []
        self._task: asyncio.Task[None] | None = None

    def on_change(self, fn: Callable[[Change], None]) -> None:
        self._listeners.append(fn)

    def head(self, key: str) -> str | None:
        state = self.states.get(key)
        return state.head if state else None

    def current(self, key: str) -> Record | None:
        head = self.head(key)
        return self.records.get(head) if head else None

    async def sync(self) -> list[Change]:
        """Apply every change the feed holds after `self.seq`; return them."""
        applied: list[Change] = []
        while batch := await self.store.changes(self.seq, 1000):
            mine = [c for c in batch if c.key.startswith(self.prefix)]
            await self._fetch(c.head for c in mine if c.head and c.head not in self.records)
            for change in mine:
                self._apply(change)
                applied.append(change)
            self.seq = batch[-1].seq
        return applied

    async def _fetch(self, ids: Iterable[str]) -> None:
        wanted = list(dict.fromkeys(ids))
        if wanted:
            self.records.update(await self.store.get_many(wanted))

    def _apply(self, change: Change) -> None:
        old = self.states.get(change.key)
        version = (old.version if old else 0) + (1 if change.kind == "head" else 0)
        self.states[change.key] = KeyState(change.key, change.owner, change.head, version)
        self.applied += 1
        for fn in self._listeners:
            fn(change)

    async def follow(self) -> None:
        """Apply changes as they arrive, until cancelled."""
        await self.sync()
        async for change in self.store.subscribe(self.seq):
            if change.key.startswith(self.prefix):
                if change.head and change.head not in self.records:
                    await self._fetch([change.head])
                self._apply(change)
            self.seq = change.seq

    def start(self) -> None:
        """Follow the feed in a background task of the running loop."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self.follow())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
