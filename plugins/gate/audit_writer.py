"""Deferred audit: a gate's allow records written in batches, off the call path.

With `Gate(audit="deferred")`, an allow is queued here and the call may run at once; a background
task appends the queue to the store's journal in one transaction per batch. Refusals are still
written before the gate answers, since the one-replan budget is made of them.

What this trades: an allow is on record shortly after the call starts instead of before it, and a
process that dies without closing its gate loses the allows still queued (at most `max_batch`,
written within `max_delay` seconds). It still fails closed: once a batch cannot be written, every
allow blocks (`audit_unavailable`) until a retry of that batch succeeds, and a queue that grows
past `max_pending` blocks too. Nothing queued is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib

from planfence.shared_memory import AsyncStore, StoreError, WriteBatch

from .audit import Decision


class AuditBacklogError(StoreError):
    """The deferred audit cannot take another record: its last write failed, or it is full."""


class DeferredAudit:
    """Queues gate decisions and appends them to `store`'s journal in batches."""

    def __init__(
        self,
        store: AsyncStore,
        *,
        max_batch: int = 256,
        max_delay: float = 0.05,
        max_pending: int = 10_000,
    ) -> None:
        self.store = store
        self.max_batch = max_batch
        self.max_delay = max_delay
        self.max_pending = max_pending
        self.written = 0
        self.failure: str | None = None
        self._pending: list[Decision] = []
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def append(self, decision: Decision) -> None:
        """Queue one decision; raise `AuditBacklogError` when it cannot be kept."""
        if self._closed:
            raise AuditBacklogError("the gate's deferred audit is closed")
        if self.failure is not None:
            raise AuditBacklogError(f"deferred audit records are not being written: {self.failure}")
        if len(self._pending) >= self.max_pending:
            raise AuditBacklogError(f"{len(self._pending)} audit records are waiting to be written")
        self._pending.append(decision)
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run())
        if len(self._pending) >= self.max_batch and self._wake is not None:
            self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._pending)

    def holds(self, plan: str, reasons: tuple[str, ...]) -> bool:
        """Whether a queued decision is about `plan` with one of `reasons` (a check's budget
        walk must see the allows this gate has not written yet)."""
        return any(d.plan == plan and d.reason in reasons for d in self._pending)

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.max_delay)
            self._wake.clear()
            await self._write_some()
            if self._closed:
                return

    async def _write_some(self) -> bool:
        """Write one batch of what is queued now; False when that write failed."""
        batch = self._pending[: self.max_batch]
        if not batch:
            return True
        try:
            await self.store.write(WriteBatch(decisions=tuple(batch)))
        except Exception as exc:  # kept, retried on the next round; allows block meanwhile
            self.failure = f"{type(exc).__name__}: {exc}"
            return False
        del self._pending[: len(batch)]
        self.written += len(batch)
        self.failure = None
        return True

    async def flush(self) -> None:
        """Write everything queued now; raise `AuditBacklogError` if some of it cannot be."""
        while self._pending and await self._write_some():
            pass
        if self._pending:
            left = len(self._pending)
            raise AuditBacklogError(f"{left} audit records not written: {self.failure}")

    async def aclose(self) -> None:
        """Write what is queued and stop."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            assert self._wake is not None
            self._wake.set()
            await task  # lets a write in flight finish: cancelling it could write a batch twice
        await self.flush()
