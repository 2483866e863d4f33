"""The store's core: the two primitives each backend implements, and how reads are answered.

Backends implement `_read` (a batch of read ops answered from one consistent snapshot) and `_write`
(a write batch, checked with `plan_batch` and applied atomically). Optional, with defaults here:
`_wait_for_change` (a wake-up hint for `subscribe`), `_transact` (a read flow and the write it
decides in one hop, which SQLite overrides), `_open` and `_close` (connect and migrate, release
connections), and the read ops a backend lists in `optional_reads` (a lineage prefetch).
Integrity is checked here: every record row a backend returns is re-hashed against its id (once
per distinct row, through a cache).

A store's life is kept here too, the same on every backend: `aclose()` first writes what the
writers registered with `drain_on_close` queued for it (a gate's deferred audit), then closes the
backend, and from then on every use raises `StoreClosedError`: a closed store never reopens.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, ClassVar, Protocol, TypeVar

from .batches import WriteBatch, WriteResult, checked_batch
from .errors import StoreClosedError
from .reads import CORE_READS, GetKeys, GetRecords, Lineage, ReadFlow, ReadOp
from .records import DEFAULT_LIMITS, StoreLimits, VerifiedRecords
from .signing import HeadSigner
from .urls import redact_url

T = TypeVar("T")
Decide = Callable[[T], WriteBatch | None]


class Drains(Protocol):
    """Something that queues writes for a store (a gate's deferred audit) and writes them out
    when the store closes (see `StoreCore.drain_on_close`)."""

    async def drain(self) -> None:
        """Write what is queued for the store, which closes next; report (never raise) what
        cannot be written, since nothing can write it later."""


class StoreCore:
    """The primitives and the read machinery; `AsyncStore` derives the public API from them."""

    url: str = ""
    poll_interval: float = 0.05
    optional_reads: ClassVar[frozenset[type[Any]]] = frozenset()
    """The optional read ops (beyond `CORE_READS`) this backend's `_read` answers."""
    supports_leases: ClassVar[bool] = False
    """Whether `_write` stores head leases (passes the touched keys' lease rows and its clock to
    `plan_batch` and applies the plan's `leases`)."""
    shared_writers: ClassVar[bool] = False
    """Whether several stores (several processes) may open one place and write to it at once:
    writes to a key are then serialised across them, which the conformance race checks."""

    signer: HeadSigner | None = None
    """Signs the head advances its agent makes through this store (see `signing`); set it
    (`store.signer = signing_key`) or pass `signer=` to `open_store`."""

    def __init__(self, *, limits: StoreLimits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self._verified = VerifiedRecords()
        self._verified_lock = threading.Lock()  # a backend may decode on its own thread
        self._answered_ops = self.optional_reads | CORE_READS  # asked on every read
        self._closed = False
        self._drains: weakref.WeakSet[Drains] = weakref.WeakSet()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {redact_url(self.url)}>"

    # ---- the primitives each backend implements

    async def _read(self, ops: Sequence[ReadOp]) -> list[Any]:
        """Answer `ops` (core ones, and those in `optional_reads`) from one consistent snapshot,
        one raw answer per op (see `planfence.shared_memory.reads`)."""
        raise NotImplementedError

    async def _write(self, batch: WriteBatch) -> WriteResult:
        """Atomically check (with `plan_batch`) and write `batch`; the changes get their seq, the
        journal entries their ids (in batch order)."""
        raise NotImplementedError

    # ---- optional overrides

    async def _wait_for_change(self, since: int, timeout: float) -> None:
        """Return when a change after `since` may exist; a hint only (callers re-read)."""
        await asyncio.sleep(min(self.poll_interval, timeout))

    async def _transact(
        self, flow: ReadFlow[T], decide: Decide[T] | None, short: bool = False
    ) -> tuple[T, WriteResult | None]:
        """Run `flow`, then write the batch `decide` returns (None: nothing). Backends may
        override to do both in one hop; the write is not conditional on the reads. `short`:
        the flow reads little, so a backend may hold its write lock from the first read."""
        result = await self._run_flow(flow)
        batch = decide(result) if decide is not None else None
        return result, (await self._write(batch) if batch is not None else None)

    async def _open(self) -> None:
        """Connect, and create or migrate the schema; idempotent (`setup` calls it)."""

    async def _close(self) -> None:
        """Release connections, once (`aclose` calls it, after the drains)."""

    # ---- the store's life

    @property
    def closed(self) -> bool:
        """Whether `aclose()` was called: every use now raises `StoreClosedError`."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(
                f"the store {redact_url(self.url)} is closed: open a new one to use it again"
            )

    async def setup(self) -> None:
        """Connect, and create or migrate the schema; idempotent.

        Raises:
            StoreClosedError: the store was closed (a closed store never reopens).
        """
        self._check_open()
        await self._open()

    def drain_on_close(self, writer: Drains) -> None:
        """Have `aclose()` await `writer.drain()` before it closes the store: a gate's deferred
        audit registers here, so closing the store alone loses none of the allows it queued.
        Held weakly: a writer that is gone is simply not drained. On a closed store it does
        nothing (the writer's first write raises `StoreClosedError`)."""
        if not self._closed:
            self._drains.add(writer)

    async def aclose(self) -> None:
        """Write what the registered writers queued (`drain_on_close`), then release the
        connections; every later use raises `StoreClosedError`. Closing twice does nothing."""
        if self._closed:
            return
        failed: BaseException | None = None
        for writer in list(self._drains):
            try:
                await writer.drain()
            except Exception as exc:  # a writer that breaks its promise: close anyway, then say
                failed = failed or exc
        if self._closed:  # closed by another call while this one drained
            return
        self._closed = True
        self._drains.clear()
        await self._close()
        if failed is not None:
            raise failed

    async def __aenter__(self) -> Any:
        await self.setup()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _commit(self, batch: WriteBatch) -> WriteResult:
        """`_write`, on a store that is open (every write of the public API goes through it)."""
        self._check_open()
        return await self._write(batch)

    def _signed(self, batch: WriteBatch) -> WriteBatch:
        """`batch`, signed by the store's signer unless it brings its own."""
        if batch.signer is not None or self.signer is None or not batch.ops:
            return batch
        return replace(batch, signer=self.signer)

    # ---- answering reads

    def _asked(self, ops: Sequence[ReadOp]) -> Sequence[ReadOp]:
        """The ops this backend answers (all of them, nearly always: then `ops` itself)."""
        known = self._answered_ops
        for op in ops:
            if type(op) not in known:
                return [op for op in ops if type(op) in known]
        return ops

    def _decoded(self, ops: Sequence[ReadOp], raw: Sequence[Any]) -> list[Any]:
        """One answer per op: records verified (dicts by id), key states by key, and None for an
        optional op this backend does not answer."""
        answers = iter(raw)
        known = self._answered_ops
        return [self._decode(op, next(answers)) if type(op) in known else None for op in ops]

    def _decode(self, op: ReadOp, raw: Any) -> Any:
        kind = type(op)
        if kind is GetKeys:
            return {s.key: s for s in raw}
        if kind is GetRecords or kind is Lineage:
            with self._verified_lock:
                load = self._verified.load
                return {row[0]: load(*row) for row in raw}
        return raw

    def _answer_sync(
        self, ops: Sequence[ReadOp], read: Callable[[Sequence[ReadOp]], list[Any]]
    ) -> list[Any]:
        """`_answer` for a backend driving a flow on its own thread with its own `read`."""
        asked = self._asked(ops)
        return self._decoded(ops, read(asked) if asked else [])

    async def _answer(self, ops: Sequence[ReadOp]) -> list[Any]:
        self._check_open()
        asked = self._asked(ops)
        return self._decoded(ops, await self._read(asked) if asked else [])

    async def _run_flow(self, flow: ReadFlow[T]) -> T:
        try:
            ops = next(flow)
            while True:
                ops = flow.send(await self._answer(ops))
        except StopIteration as stop:
            result: T = stop.value
            return result

    async def read(self, ops: Sequence[ReadOp]) -> list[Any]:
        """Answer a batch of read ops from one consistent snapshot (records verified, as dicts
        by id; keys as dicts by key; an optional op the backend lacks is answered None)."""
        return await self._answer(ops if type(ops) in (list, tuple) else list(ops))

    async def read_flow(self, flow: ReadFlow[T], *, short: bool = False) -> T:
        """Run a flow of dependent reads (in one hop where the backend can). `short=True`
        says it reads a row or two (SQLite with `io=loop` runs only such flows on the loop)."""
        self._check_open()
        return (await self._transact(flow, None, short=short))[0]

    async def transact(
        self, flow: ReadFlow[T], decide: Decide[T], *, short: bool = False
    ) -> tuple[T, WriteResult | None]:
        """Run `flow`, let `decide` (pure, fast, no I/O) turn its result into a write batch or
        None, and apply that batch; in one hop where the backend can (SQLite). `short=True`
        says the flow reads a row or two: SQLite then runs reads and write in one transaction."""

        def checked(result: T) -> WriteBatch | None:
            batch = decide(result)
            return None if batch is None else self._signed(checked_batch(batch, self.limits))

        self._check_open()
        return await self._transact(flow, checked, short=short)
