"""How a gate records its decisions (`AuditMode`), and the deferred audit: a gate's allow records
written in batches, off the call path.

The modes (`Gate(audit=...)`, and every adapter's `audit`):

- `"deferred"` (the default): refusals written before the gate answers; allows queued here and
  written by group commit within `max_delay` (50 ms).
- `"durable"`: every decision written to the journal before the gate answers; an allow whose
  record cannot be written becomes a block. `True` means the same.
- `"off"`: only the stale refusals the replan budget needs. `False` means the same.

With `"deferred"`, an allow is queued here and the call may run at once; a background
task appends the queue to the store's journal in one transaction per batch. Refusals are still
written before the gate answers, since the one-replan budget is made of them.

What this trades: an allow is on record shortly after the call starts instead of before it, and a
process that dies without closing its gate or its store loses the allows still queued (those of
the last `max_delay` seconds, normally). Closing the store writes them too: the deferred audit
registers with its store (`AsyncStore.drain_on_close`), whose `aclose()` drains it first.

It still fails closed: once a batch cannot be written, every allow blocks (`audit_unavailable`)
until a retry of that batch succeeds; so does a queue past `max_pending`, or one whose oldest
record has waited `max_wait` seconds (a write that hangs). Nothing queued is dropped while the
store is open, and no batch is written twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Literal, Protocol

from planfence.shared_memory import AsyncStore, Entry, StoreError, WriteBatch
from planfence.shared_memory.records import utc_at
from planfence.shared_memory.urls import redact_url

from .audit import Decision

logger = logging.getLogger(__name__)

AuditMode = Literal["deferred", "durable", "off"] | bool
"""How a gate records decisions: `"deferred"` (default), `"durable"` (or True), `"off"` (False)."""
AuditName = Literal["deferred", "durable", "off"]
DEFAULT_AUDIT: AuditName = "deferred"
AUDIT_MODES: tuple[AuditName, ...] = ("deferred", "durable", "off")


def audit_mode(value: object) -> AuditName:
    """The mode's name; `True` is `"durable"`, `False` `"off"`; anything else a `ValueError`."""
    if value is True:
        return "durable"
    if value is False:
        return "off"
    if value == "deferred":
        return "deferred"
    if value == "durable":
        return "durable"
    if value == "off":
        return "off"
    raise ValueError(f"audit must be 'deferred', 'durable' or 'off', not {value!r}")


class AuditBacklogError(StoreError):
    """The deferred audit cannot take another record: its last write failed, or it is full."""


class Queued(Protocol):
    """What the deferred audit queues: a decision, or a verdict turned into one when written."""

    @property
    def plan(self) -> str | None: ...

    @property
    def reason(self) -> str: ...


def _decision_of(item: Queued, at: str) -> Decision:
    assert isinstance(item, Decision)
    return item if item.at else replace(item, at=at)


class DeferredAudit:
    """Queues gate decisions and appends them to `store`'s journal in batches.

    One batch is written at a time. Each batch's entries carry a label `audit_batch` with the
    batch's id, so a write whose outcome is unknown (a connection lost at commit, a cancelled
    call whose thread went on) is looked up before it is retried: a batch is never written twice.
    """

    def __init__(
        self,
        store: AsyncStore,
        *,
        decision: Callable[[Queued, str], Decision] = _decision_of,
        max_batch: int = 256,
        max_delay: float = 0.05,
        max_pending: int = 10_000,
        max_wait: float | None = None,
    ) -> None:
        self.store = store
        self.decision = decision
        """Turns a queued item and the time it was queued into its `Decision`, when written (a
        gate queues its verdicts: an allow on the call path costs a list append)."""
        self.max_batch = max_batch
        self.max_delay = max_delay
        self.max_pending = max_pending
        self.max_wait = max(1.0, 20 * max_delay) if max_wait is None else max_wait
        """Seconds the oldest queued record may wait before allows block (a write that hangs)."""
        self.written = 0
        self.failure: str | None = None
        self._pending: list[tuple[float, float, Queued]] = []  # (monotonic, wall clock, item)
        self._uncertain: str | None = None  # id of the batch whose write failed
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        self._closed = False
        store.drain_on_close(self)  # closing the store writes this queue first

    def append(self, decision: Queued) -> bool:
        """Queue one decision; raise `AuditBacklogError` when it cannot be kept. True when the
        oldest queued record has waited twice `max_delay`: the writer has not had the loop, as
        under a caller whose every await finishes without suspending (a store on the loop) and
        that never yields it; the caller should then `catch_up`."""
        if self._closed:
            raise AuditBacklogError("the gate's deferred audit is closed")
        if self.failure is not None:
            raise AuditBacklogError(f"deferred audit records are not being written: {self.failure}")
        pending = self._pending
        if len(pending) >= self.max_pending:
            raise AuditBacklogError(f"{len(pending)} audit records are waiting to be written")
        now = time.monotonic()
        waited = now - pending[0][0] if pending else 0.0
        if waited > self.max_wait:
            raise AuditBacklogError(f"the oldest audit record has waited {waited:.1f} s")
        # Stamped now: the journal's time of a deferred allow is when it was decided, not written.
        pending.append((now, time.time(), decision))
        self._ensure_writer()
        if len(pending) >= self.max_batch and self._wake is not None:
            self._wake.set()
        return waited > 2 * self.max_delay

    def _ensure_writer(self) -> None:
        """A writer task on the running loop: a gate may outlive a loop (`asyncio.run` per call),
        and a writer that stopped must not leave its queue behind."""
        loop = asyncio.get_running_loop()
        task = self._task
        if task is not None and not task.done() and task.get_loop() is loop:
            return
        if task is not None and task.done() and not task.cancelled() and task.exception():
            self.failure = f"the audit writer stopped: {task.exception()!r}"
            raise AuditBacklogError(self.failure)
        self._wake = asyncio.Event()
        self._task = loop.create_task(self._run())

    async def catch_up(self) -> None:
        """Write what is queued now, from the caller, as the writer would (see `append`); a
        write that fails is kept for a retry, and the next allow blocks, as with the writer's."""
        while self._pending and await self._write_some():
            pass

    @property
    def pending(self) -> int:
        return len(self._pending)

    def holds(self, plan: str, reasons: tuple[str, ...]) -> bool:
        """Whether a queued decision is about `plan` with one of `reasons` (a check's budget
        walk must see the allows this gate has not written yet)."""
        return any(d.plan == plan and d.reason in reasons for _, _, d in self._pending)

    async def _run(self) -> None:
        wake = self._wake
        assert wake is not None
        while not self._closed:
            with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                await asyncio.wait_for(wake.wait(), self.max_delay)
            wake.clear()
            await self._write_some()

    def _write_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock[0] is not loop:
            self._lock = (loop, asyncio.Lock())
        return self._lock[1]

    async def _write_some(self) -> bool:
        """Write one batch of what is queued now; False when that write failed."""
        async with self._write_lock():
            if not self._pending:
                return True
            batch = self._pending[: self.max_batch]
            batch_id = self._uncertain or uuid.uuid4().hex
            try:
                if self._uncertain is None or not await self._landed(batch_id):
                    entries = tuple(
                        labelled(self.decision(d, utc_at(wall)), batch_id) for _, wall, d in batch
                    )
                    self._uncertain = batch_id
                    await self.store.write(WriteBatch(entries=entries))
            except Exception as exc:  # kept and looked up before a retry; allows block meanwhile
                self.failure = f"{type(exc).__name__}: {exc}"
                return False
            del self._pending[: len(batch)]  # writes take turns: these are the ones written
            self._uncertain = None
            self.written += len(batch)
            self.failure = None
            return True

    async def _landed(self, batch_id: str) -> bool:
        """Whether a batch whose write failed was committed after all."""
        found = await self.store.journal(labels={BATCH_LABEL: batch_id}, limit=1)
        return bool(found)

    async def flush(self) -> None:
        """Write everything queued now; raise `AuditBacklogError` if some of it cannot be."""
        await self.catch_up()
        if self._pending:
            left = len(self._pending)
            raise AuditBacklogError(f"{left} audit records not written: {self.failure}")

    def __del__(self) -> None:
        if self._pending:  # never silent: say what a gate dropped without being closed lost
            logger.error(
                "%d allow records were never written to the audit journal: the gate was not "
                "closed (call `aclose()` / `close()`, or use it as a context manager)",
                len(self._pending),
            )

    async def drain(self) -> None:
        """Write the queue because the store is closing (it calls this from its `aclose`).
        What cannot be written is said in one log line and dropped: nothing can write it later,
        and a gate closed after its store then has nothing left to say."""
        try:
            await self.aclose()
        except Exception as exc:
            lost, self._pending = len(self._pending), []
            logger.error(
                "%d allow records were not written to the audit journal before the store %s "
                "closed: %s",
                lost,
                redact_url(self.store.url),
                exc,
            )

    async def aclose(self) -> None:
        """Write what is queued and stop (also after the writer's loop has ended)."""
        task = self._task
        loop = task.get_loop() if task is not None and not task.done() else None
        if loop is not None and loop.is_running() and loop is not asyncio.get_running_loop():
            # The writer runs on another loop (another thread): close there, so a batch it is
            # writing now is never written again from here.
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self.aclose(), loop))
            return
        self._closed = True
        task, self._task = self._task, None
        if task is not None and not task.done() and task.get_loop() is asyncio.get_running_loop():
            assert self._wake is not None
            self._wake.set()
            # Let a write in flight finish: cancelling it could leave its outcome unknown.
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.flush()


BATCH_LABEL = "audit_batch"


def labelled(decision: Decision, batch_id: str) -> Entry:
    """`decision`'s journal entry, filed under its batch's id too."""
    return decision.to_entry(**{BATCH_LABEL: batch_id})
