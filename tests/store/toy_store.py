"""A toy backend: a dict behind a lock, the two required primitives and a tamper hook, nothing
else. It passes the whole conformance suite, which is what a new backend has to show."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from planfence.shared_memory import AsyncStore, WriteBatch, WriteResult
from planfence.shared_memory import reads as r
from planfence.shared_memory.batches import plan_batch
from planfence.shared_memory.records import utc_now

FIELDS = ("id", "key", "value_json", "parents", "author", "kind", "supersedes", "created_at")


class ToyStore(AsyncStore):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lock = threading.Lock()
        self.records: dict[str, tuple[Any, ...]] = {}
        self.keys_: dict[str, Any] = {}
        self.feed: list[Any] = []
        self.entries: list[Any] = []

    async def _read(self, ops: Sequence[r.ReadOp]) -> list[Any]:
        with self.lock:
            return [self.answer(op) for op in ops]

    def answer(self, op: r.ReadOp) -> Any:
        if isinstance(op, r.GetRecords):
            return [self.records[i] for i in op.ids if i in self.records]
        if isinstance(op, r.GetKeys):
            return [self.keys_[k] for k in op.keys if k in self.keys_]
        if isinstance(op, r.ListKeys):
            return [s for k, s in sorted(self.keys_.items()) if k.startswith(op.prefix)]
        if isinstance(op, r.IdsWithPrefix):
            return sorted(i for i in self.records if i.startswith(op.prefix))[: op.limit]
        if isinstance(op, r.GetChanges):
            return self.feed[op.since : op.since + op.limit]
        if isinstance(op, r.GetOwnerChanges):
            key, after = op.key, op.after_epoch
            return [c for c in self.feed if (c.key, c.kind) == (key, "owner") and c.epoch > after]
        assert isinstance(op, r.QueryJournal)
        return [e for e in reversed(self.entries) if op.query.matches(e)][: op.query.limit]

    async def _write(self, batch: WriteBatch) -> WriteResult:
        with self.lock:
            at, refs = utc_now(), batch.referenced_ids()
            record_keys = {i: self.records[i][1] for i in refs if i in self.records}
            record_keys.update({rec.id: rec.key for rec in batch.records})
            touched = batch.keys()
            states = {k: self.keys_[k] for k in touched if k in self.keys_}
            planned = plan_batch(batch, states, refs & self.records.keys(), record_keys, at)
            for rec in batch.records:
                self.records.setdefault(rec.id, tuple(getattr(rec, f) for f in FIELDS))
            self.keys_.update(planned.new_states)
            out = WriteResult()
            for change in planned.changes:
                out.changes.append(replace(change, seq=len(self.feed) + 1))
                self.feed.append(out.changes[-1])
            for entry in batch.entries:
                self.entries.append(replace(entry, id=len(self.entries) + 1, at=entry.at or at))
                out.entry_ids.append(len(self.entries))
            return out

    async def _tamper_record(self, record_id: str, fields: Mapping[str, Any] | None) -> None:
        with self.lock:
            row = dict(zip(FIELDS, self.records.pop(record_id), strict=True))
            if fields is not None:
                self.records[record_id] = tuple({**row, **fields}[f] for f in FIELDS)

    async def _tamper_head(self, state: Any) -> None:
        with self.lock:
            self.keys_[state.key] = state
