"""In-memory backend: one process, nothing persisted. For tests and examples.

It implements the two primitives alone; everything else comes from `AsyncStore`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..batches import WriteBatch, WriteResult, plan_batch
from ..journal import Entry
from ..lease_writes import needs_leases
from ..leases import LeaseRow
from ..model import Change, KeyState
from ..reads import (
    GetChanges,
    GetKeys,
    GetOwnerChanges,
    GetRecords,
    IdsWithPrefix,
    ListKeys,
    QueryJournal,
    ReadOp,
)
from ..records import DEFAULT_LIMITS, StoredFields, StoreLimits, utc_now
from ..store import AsyncStore


class MemoryStore(AsyncStore):
    supports_leases = True

    def __init__(self, *, limits: StoreLimits = DEFAULT_LIMITS) -> None:
        super().__init__(limits=limits)
        self.url = "memory://"
        self.poll_interval = 0.01
        # A thread lock, not an asyncio one: the sync `Store` and async callers may share it.
        self._lock = threading.Lock()
        self._records: dict[str, StoredFields] = {}
        self._keys: dict[str, KeyState] = {}
        self._feed: list[Change] = []
        self._journal: list[Entry] = []
        self._leases: dict[str, dict[str, LeaseRow]] = {}

    async def _read(self, ops: Sequence[ReadOp]) -> list[Any]:
        self._check_open()
        with self._lock:
            return [self._answer_one(op) for op in ops]

    def _answer_one(self, op: ReadOp) -> Any:
        if isinstance(op, GetRecords):
            return [row for i in op.ids if (row := self._records.get(i)) is not None]
        if isinstance(op, GetKeys):
            return [s for k in op.keys if (s := self._keys.get(k)) is not None]
        if isinstance(op, ListKeys):
            return [s for k, s in sorted(self._keys.items()) if k.startswith(op.prefix)]
        if isinstance(op, IdsWithPrefix):
            return sorted(i for i in self._records if i.startswith(op.prefix))[: op.limit]
        if isinstance(op, GetChanges):
            return self._feed[op.since : op.since + op.limit]
        if isinstance(op, GetOwnerChanges):
            return [
                c
                for c in self._feed
                if c.key == op.key and c.kind == "owner" and c.epoch > op.after_epoch
            ]
        if isinstance(op, QueryJournal):
            found = [e for e in reversed(self._journal) if op.query.matches(e)]
            return found[: op.query.limit]
        raise TypeError(f"unknown read {type(op).__name__}")

    async def _write(self, batch: WriteBatch) -> WriteResult:
        self._check_open()
        with self._lock:
            at = utc_now()
            known: Mapping[str, StoredFields] = self._records
            refs = batch.referenced_ids()
            record_keys = {r: known[r][1] for r in refs if r in known}
            record_keys.update({r.id: r.key for r in batch.records})
            touched = batch.keys()
            states = {k: s for k in touched if (s := self._keys.get(k)) is not None}
            leased = needs_leases(batch)
            rows = [r for k in touched for r in self._leases.get(k, {}).values()] if leased else []
            now = time.time()
            planned = plan_batch(
                batch,
                states,
                {r for r in refs if r in known},
                record_keys,
                at,
                lease_rows=rows,
                now=now,
            )
            if leased:
                self._apply_leases(touched, planned.leases.upsert, planned.leases.delete, now)
            for rec in batch.records:
                self._records.setdefault(
                    rec.id,
                    (
                        rec.id,
                        rec.key,
                        rec.value_json,
                        rec.parents,
                        rec.author,
                        rec.kind,
                        rec.supersedes,
                        rec.created_at,
                    ),
                )
            self._keys.update(planned.new_states)
            result = WriteResult()
            for change in planned.changes:
                self._feed.append(replace(change, seq=len(self._feed) + 1))
                result.changes.append(self._feed[-1])
            for entry in batch.entries:
                self._journal.append(replace(entry, id=len(self._journal) + 1, at=entry.at or at))
                result.entry_ids.append(len(self._journal))
            return result

    def _apply_leases(
        self,
        touched: list[str],
        upsert: list[LeaseRow],
        delete: list[tuple[str, str]],
        now: float,
    ) -> None:
        for key in touched:  # expired leases of the touched keys go
            held = self._leases.get(key, {})
            for lease in [i for i, r in held.items() if r.expires <= now]:
                del held[lease]
        for key, lease in delete:
            self._leases.get(key, {}).pop(lease, None)
        for row in upsert:
            self._leases.setdefault(row.key, {})[row.lease] = row
        for key in touched:
            if not self._leases.get(key):
                self._leases.pop(key, None)

    async def _tamper_record(self, record_id: str, fields: Mapping[str, Any] | None) -> None:
        """For integrity tests: change stored fields of a record (None: delete it)."""
        with self._lock:
            if fields is None:
                del self._records[record_id]
                return
            names = (
                "id",
                "key",
                "value_json",
                "parents",
                "author",
                "kind",
                "supersedes",
                "created_at",
            )
            row: dict[str, Any] = dict(zip(names, self._records[record_id], strict=True))
            row.update(fields)
            row["parents"] = tuple(row["parents"])
            self._records[record_id] = tuple(row[n] for n in names)

    async def _tamper_head(self, state: KeyState) -> None:
        """For trust tests: overwrite a key's state (owner, head, sequence, epoch, signature)."""
        with self._lock:
            self._keys[state.key] = state
