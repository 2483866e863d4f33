"""The abstract store's public API, derived once from the two primitives of `StoreCore`.

Backends subclass `AsyncStore` and implement `_read` and `_write` (see `core`); everything here
(owners, writes, reads, the lineage walk, the change feed, the audit journal) works unchanged on
every backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import replace
from typing import Final

from .batches import (
    AdvanceHead,
    AssignOwner,
    ReassignOwner,
    TransferOwner,
    WriteBatch,
    checked_batch,
)
from .core import StoreCore
from .errors import (
    AdvancePendingError,
    AmbiguousIdError,
    HeadConflictError,
    InvalidValueError,
    LeasesUnsupportedError,
    NotOwnerError,
    UnknownKeyError,
    UnknownRecordError,
)
from .journal import Entry, JournalQuery, ToEntry, as_entry, bound_entry
from .lease_writes import write_waiting
from .leases import DropLease, ExpectHead, HoldKey, Lease, check_ttl, new_lease_id
from .lineage import DEFAULT_MAX_RECORDS, Frontier
from .model import CURRENT, Change, KeyState, _Current
from .reads import (
    GetChanges,
    GetKeys,
    GetRecords,
    IdsWithPrefix,
    ListKeys,
    QueryJournal,
    frontier_flow,
)
from .records import (
    JSON,
    KIND_FACT,
    Record,
    utc_now,
    valid_keys,
    validate_agent,
    validate_key,
    validate_record_id,
)

MIN_SHORT_ID: Final = 8
"""Shortest record-id prefix accepted as input (ids are printed as their first 12 digits)."""
SHORT_ID_RE: Final = re.compile(rf"[0-9a-f]{{{MIN_SHORT_ID},63}}")
AMBIGUOUS_SHOWN: Final = 10


class AsyncStore(StoreCore):
    """Versioned public records with owner-controlled heads. Async API; see `Store` for sync."""

    async def __aenter__(self) -> AsyncStore:
        await self.setup()
        return self

    # ---- ownership

    async def own(self, key: str, owner: str, *, by: str | None = None) -> Change:
        """Assign the first owner of `key` (`by`: the assigning agent, default the owner itself;
        the store's signer signs the claim when it is `by`'s). Raises `AlreadyOwnedError` if it
        has one."""
        validate_key(key, self.limits)
        validate_agent(owner, self.limits)
        by = validate_agent(by, self.limits) if by is not None else owner
        batch = self._signed(WriteBatch(ops=(AssignOwner(key, owner, by),)))
        return (await self._commit(batch)).changes[0]

    async def transfer(self, key: str, new_owner: str, *, by: str) -> Change:
        """Hand `key` to `new_owner`; only the current owner may. The key's owner epoch goes up
        by one in the same write (the change carries it), so answers and signed heads of the
        previous owner stop counting; the head stays, unsigned until its new owner signs it.

        Raises:
            NotOwnerError: `by` does not own `key`. UnknownKeyError: `key` has no owner.
        """
        validate_key(key, self.limits)
        validate_agent(new_owner, self.limits)
        validate_agent(by, self.limits)
        batch = self._signed(WriteBatch(ops=(TransferOwner(key, new_owner, by),)))
        return (await self._commit(batch)).changes[0]

    async def reassign(
        self, key: str, new_owner: str, *, by: str, from_epoch: int | None = None
    ) -> Change:
        """Take `key` over for `new_owner` without its owner (whose machine is gone for good):
        `by` is an assigner (an agent of the gates' `owner_assigners`), and the store's signer
        signs the ownership claim when it is `by`'s. The owner epoch goes up by one in the same
        write and the key's leases end, so the old owner is fenced: its writes are refused
        (`NotOwnerError`), its answers and signed heads name a stale epoch, and fencing tokens
        checked in its epoch stop verifying. The head stays, unsigned until the new owner signs.

        The store takes `by`'s name as it takes every writer's; a gate that does not trust the
        store accepts the new owner only from a claim signed by one of its `owner_assigners`.

        Args:
            from_epoch: the epoch taken over; when the key has moved past it since (another
                reassignment or a transfer), nothing is written.

        Raises:
            UnknownKeyError: `key` has no owner.
            EpochConflictError: `from_epoch` is not the key's epoch.
        """
        validate_key(key, self.limits)
        validate_agent(new_owner, self.limits)
        validate_agent(by, self.limits)
        op = ReassignOwner(key, new_owner, by, from_epoch)
        return (await self._commit(self._signed(WriteBatch(ops=(op,))))).changes[0]

    async def epoch(self, key: str) -> int:
        """The owner epoch of `key` (1 for its first owner, +1 per transfer or reassignment).

        Raises:
            UnknownKeyError: `key` has no owner.
        """
        state = (await self.states([key])).get(key)
        if state is None:
            raise UnknownKeyError(key)
        return state.epoch

    async def owner(self, key: str) -> str | None:
        state = (await self.states([key])).get(key)
        return state.owner if state else None

    # ---- writes

    async def put(
        self,
        key: str,
        value: JSON,
        *,
        author: str,
        parents: Iterable[str] = (),
        kind: str = KIND_FACT,
        expected_head: str | _Current | None = CURRENT,
        wait: bool = True,
    ) -> Record:
        """Store a new version of `key` and advance its head, atomically; owner only.

        `expected_head` is the head the writer last saw (None: the key has no version yet). The
        default reads it just before writing, which still fails on a concurrent writer. While a
        gate holds a lease on `key`, the write waits for it to end (`wait=False`: it raises
        `LeaseHeldError` at once instead).

        Raises:
            NotOwnerError: `author` does not own `key`.
            HeadConflictError: the head is not `expected_head` (carries the current head).
            UnknownKeyError: `key` has no owner.
            UnknownRecordError: a parent the store does not hold.
            LeaseHeldError: a gate holds a lease on `key` and `wait=False`.
            InvalidKeyError: a malformed key.
            InvalidValueError: a value the store cannot keep (not JSON).
            ValueTooLargeError: a value over the store's limits.
        """
        record = Record.create(
            key, value, author=author, parents=parents, kind=kind, limits=self.limits
        )
        if isinstance(expected_head, _Current):
            state = (await self.states([key])).get(key)
            if state is None:
                raise UnknownKeyError(key)
            if state.owner != author:
                raise NotOwnerError(key, author, state.owner)
            expected = state.head
        else:
            expected = validate_record_id(expected_head) if expected_head is not None else None
        batch = WriteBatch(records=(record,), ops=(AdvanceHead(key, record.id, expected, author),))
        await write_waiting(self._commit, self._signed(batch), wait)
        return record

    async def add(
        self,
        key: str,
        value: JSON,
        *,
        author: str,
        parents: Iterable[str] = (),
        kind: str = KIND_FACT,
        supersedes: str | None = None,
        entries: Iterable[Entry | ToEntry] = (),
    ) -> Record:
        """Store a derived record (a plan, a candidate) without touching any head; `entries`
        are journal entries written with it.

        Raises:
            UnknownRecordError: a parent or `supersedes` id the store does not hold.
        """
        record = Record.create(
            key,
            value,
            author=author,
            parents=parents,
            kind=kind,
            supersedes=supersedes,
            limits=self.limits,
        )
        await self._commit(WriteBatch(records=(record,), entries=self._bounded(entries)))
        return record

    async def advance(
        self,
        key: str,
        record_id: str,
        *,
        by: str,
        expected_head: str | None,
        entries: Iterable[Entry | ToEntry] = (),
        wait: bool = True,
    ) -> Change:
        """Point `key`'s head at an already stored version of it (compare-and-set, owner only),
        with the journal `entries` written in the same write; waits for the key's leases to end,
        as `put` does."""
        validate_key(key, self.limits)
        validate_record_id(record_id)
        validate_agent(by, self.limits)
        if expected_head is not None:
            validate_record_id(expected_head)
        batch = WriteBatch(
            ops=(AdvanceHead(key, record_id, expected_head, by),),
            entries=self._bounded(entries),
        )
        return (await write_waiting(self._commit, self._signed(batch), wait)).changes[0]

    async def write(self, batch: WriteBatch, *, wait: bool = True) -> list[Change]:
        """Apply a prepared batch atomically: all of it or none of it. A head advance on a leased
        key waits for the lease to end (`wait=False`: `LeaseHeldError` at once).

        Raises:
            IntegrityError: a record whose fields do not hash to its id.
            HeadConflictError: a head in `batch.expect` moved.
            LeasesUnsupportedError: lease ops on a backend without leases.
            PlanfenceError: everything `put`, `advance`, `own` and `transfer` raise.
        """
        checked = self._signed(checked_batch(batch, self.limits))
        if checked.leases and not self.supports_leases:
            raise LeasesUnsupportedError(f"{type(self).__name__} does not hold head leases")
        return (await write_waiting(self._commit, checked, wait)).changes

    # ---- head leases

    async def lease(
        self,
        heads: Mapping[str, str | None],
        *,
        holder: str,
        ttl_ms: int,
    ) -> Lease:
        """Lease `heads`' keys for `ttl_ms` ms, if each head is still the one given: until the
        lease is released or expires, their owners' head advances wait.

        Raises:
            HeadConflictError: a head moved (the lease is not taken).
            AdvancePendingError: an owner is already waiting to advance one of the keys.
            LeasesUnsupportedError: the backend holds no leases.
        """
        if not self.supports_leases:
            raise LeasesUnsupportedError(f"{type(self).__name__} does not hold head leases")
        ttl = check_ttl(ttl_ms)
        lease = Lease(new_lease_id(), tuple(sorted(heads)), holder, ttl)
        batch = WriteBatch(
            leases=tuple(HoldKey(k, lease.id, holder, ttl) for k in lease.keys),
            expect=tuple(ExpectHead(k, heads[k]) for k in lease.keys),
        )
        try:
            await self._commit(checked_batch(batch, self.limits))
        except (HeadConflictError, UnknownKeyError, AdvancePendingError):
            raise  # refused: nothing was written
        except BaseException:
            # Cancelled, or a connection lost at commit: the lease may have been written after
            # all. Drop it, so an owner is not held back by a lease nobody holds.
            with contextlib.suppress(Exception):
                await asyncio.shield(self.release(lease))
            raise
        return lease

    async def release(self, lease: Lease) -> None:
        """End `lease` now (nothing happens if it already ended)."""
        if lease.keys:
            batch = WriteBatch(leases=tuple(DropLease(k, lease.id) for k in lease.keys))
            await self._commit(checked_batch(batch, self.limits))

    def _bounded(self, entries: Iterable[Entry | ToEntry]) -> tuple[Entry, ...]:
        return tuple(bound_entry(as_entry(e), self.limits) for e in entries)

    # ---- reads

    async def get(self, record_id: str) -> Record:
        found = await self.get_many([validate_record_id(record_id)])
        if record_id not in found:
            raise UnknownRecordError([record_id])
        return found[record_id]

    async def get_many(self, ids: Iterable[str]) -> dict[str, Record]:
        """The records the store holds among `ids` (missing ones are simply absent)."""
        wanted = tuple(dict.fromkeys(ids))
        for rid in wanted:
            validate_record_id(rid)
        if not wanted:
            return {}
        [found] = await self._answer([GetRecords(wanted)])
        # Fresh values: a caller may change `record.value`; the verified cache must not see it.
        return {i: replace(r, value=json.loads(r.value_json)) for i, r in found.items()}

    async def resolve_id(self, ref: str) -> str:
        """The full record id for `ref`: a full id, or a unique hex prefix of 8+ digits (as git).

        Raises `InvalidValueError` for anything else, `UnknownRecordError` when no stored record
        starts with the prefix, and `AmbiguousIdError` (listing the candidates) when several do.
        """
        text = ref.strip().lower() if isinstance(ref, str) else ref
        if isinstance(text, str) and len(text) == 64:
            return validate_record_id(text)
        if not isinstance(text, str) or not SHORT_ID_RE.fullmatch(text):
            raise InvalidValueError(
                f"{ref!r} is not a record id: give the 64 hex digits or a unique prefix "
                f"of at least {MIN_SHORT_ID} of them"
            )
        [found] = await self._answer([IdsWithPrefix(text, AMBIGUOUS_SHOWN + 1)])
        if not found:
            raise UnknownRecordError([text], what="record id prefix")
        if len(found) > 1:
            raise AmbiguousIdError(text, found[:AMBIGUOUS_SHOWN])
        return str(found[0])

    async def head(self, key: str) -> str | None:
        """Current head of `key`. Raises `UnknownKeyError` when the key has no owner."""
        state = (await self.states([key])).get(key)
        if state is None:
            raise UnknownKeyError(key)
        return state.head

    async def states(self, keys: Iterable[str]) -> dict[str, KeyState]:
        """Owner and head of each key that has an owner (others are absent)."""
        wanted = valid_keys(keys if type(keys) is tuple else tuple(keys), self.limits)
        if not wanted:
            return {}
        [found] = await self._answer([GetKeys(wanted)])
        return dict(found)

    async def heads(self, keys: Iterable[str]) -> dict[str, str | None]:
        return {k: s.head for k, s in (await self.states(keys)).items()}

    async def keys(self, prefix: str = "") -> list[KeyState]:
        [found] = await self._answer([ListKeys(prefix)])
        return list(found)

    async def frontier(
        self,
        roots: Iterable[str],
        scope: Iterable[str],
        *,
        max_records: int = DEFAULT_MAX_RECORDS,
    ) -> Frontier:
        """Dependency frontier of the plan(s) `roots` for the keys in `scope` (see `lineage`)."""
        return await self.read_flow(frontier_flow(roots, scope, max_records))

    async def lineage(self, record_id: str, *, max_records: int = DEFAULT_MAX_RECORDS) -> Frontier:
        """Every ancestor of `record_id` (a frontier with an empty scope)."""
        return await self.frontier([record_id], (), max_records=max_records)

    # ---- change feed

    async def changes(self, since: int = 0, limit: int = 1000) -> list[Change]:
        [found] = await self._answer([GetChanges(since, limit)])
        return list(found)

    async def last_seq(self) -> int:
        seq = 0
        while batch := await self.changes(seq, 10_000):
            seq = batch[-1].seq
        return seq

    async def subscribe(
        self, since: int = 0, *, idle_timeout: float | None = None
    ) -> AsyncIterator[Change]:
        """Yield every change after `since`, forever (or until idle for `idle_timeout` s)."""
        loop = asyncio.get_running_loop()
        idle_since = loop.time()
        while True:
            batch = await self.changes(since, 1000)
            if batch:
                for change in batch:
                    since = change.seq
                    yield change
                idle_since = loop.time()
                continue
            # Measure idleness by the clock: a backend's wait may return early (a wake-up hint)
            # or use the whole timeout (LISTEN), so counting poll intervals would be wrong.
            # Each wait is capped at the poll interval, so a notification missed before LISTEN
            # took effect delays a reader by one interval at most.
            step = self.poll_interval
            if idle_timeout is not None:
                left = idle_timeout - (loop.time() - idle_since)
                if left <= 0:
                    return
                step = min(step, left)
            await self._wait_for_change(since, max(step, 0.001))

    # ---- audit journal

    async def log(self, entry: Entry | ToEntry) -> int:
        """Append one entry to the journal; return its id. Strings and detail are cut to the
        store's audit bounds (`StoreLimits.max_audit_field_bytes`)."""
        batch = WriteBatch(entries=self._bounded([entry]))
        return (await self._commit(batch)).entry_ids[0]

    async def journal(
        self,
        *,
        kind: str | None = None,
        subject: str | None = None,
        labels: Mapping[str, str | Iterable[str] | None] | None = None,
        limit: int = 100,
        before_id: int | None = None,
    ) -> list[Entry]:
        """Journal entries matching every given field, newest first (see `JournalQuery`):
        `labels` maps a label name to the value, or any one of the values, wanted for it."""
        query = JournalQuery.where(
            kind=kind,
            subject=subject,
            labels=labels,
            limit=limit,
            before_id=before_id,
        )
        [found] = await self._answer([QueryJournal(query)])
        return list(found)

    def now(self) -> str:
        return utc_now()
