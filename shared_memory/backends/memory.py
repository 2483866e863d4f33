"""In-memory backend: one process, nothing persisted. For tests and examples."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from dataclasses import replace

from ..base import (
    AdvanceHead,
    AsyncStore,
    Change,
    Decision,
    DecisionQuery,
    KeyState,
    WriteBatch,
    plan_batch,
)
from ..records import DEFAULT_LIMITS, Record, StoreLimits, utc_now


class MemoryStore(AsyncStore):
    def __init__(self, *, limits: StoreLimits = DEFAULT_LIMITS) -> None:
        super().__init__(limits=limits)
        self.url = "memory://"
        self.poll_interval = 0.01
        # A thread lock, not an asyncio one: the sync `Store` and async callers may share it.
        self._lock = threading.Lock()
        self._records: dict[str, Record] = {}
        self._keys: dict[str, KeyState] = {}
        self._changes_log: list[Change] = []
        self._decision_log: list[Decision] = []

    async def _apply(self, batch: WriteBatch) -> list[Change]:
        with self._lock:
            at = utc_now()
            refs = batch.referenced_ids()
            existing = {r for r in refs if r in self._records}
            record_keys = {r.id: r.key for r in batch.records}
            for op in batch.ops:
                if isinstance(op, AdvanceHead) and op.record_id in self._records:
                    record_keys[op.record_id] = self._records[op.record_id].key
            touched = batch.keys()
            states = {k: s for k in touched if (s := self._keys.get(k)) is not None}
            planned = plan_batch(batch, states, existing, record_keys, at)
            for rec in batch.records:
                self._records.setdefault(rec.id, rec)
            self._keys.update(planned.new_states)
            out = []
            for change in planned.changes:
                stamped = replace(change, seq=len(self._changes_log) + 1)
                self._changes_log.append(stamped)
                out.append(stamped)
            for d in batch.decisions:
                stamped_d = replace(d, id=len(self._decision_log) + 1, at=d.at or at)
                self._decision_log.append(stamped_d)
            return out

    async def _append_decision(self, decision: Decision) -> int:
        with self._lock:
            new_id = len(self._decision_log) + 1
            self._decision_log.append(replace(decision, id=new_id, at=decision.at or utc_now()))
            return new_id

    async def _get_records(self, ids: Sequence[str]) -> dict[str, Record]:
        # Fresh values, as the SQL backends give: a caller mutating `record.value` (a dict)
        # must not change what the store holds under a content-addressed id.
        return {
            i: replace(rec, value=json.loads(rec.value_json))
            for i in ids
            if (rec := self._records.get(i)) is not None
        }

    async def _get_keys(self, keys: Sequence[str]) -> dict[str, KeyState]:
        return {k: self._keys[k] for k in keys if k in self._keys}

    async def _list_keys(self, prefix: str) -> list[KeyState]:
        return [s for k, s in sorted(self._keys.items()) if k.startswith(prefix)]

    async def _ids_with_prefix(self, prefix: str, limit: int) -> list[str]:
        return sorted(i for i in self._records if i.startswith(prefix))[:limit]

    async def _changes(self, since: int, limit: int) -> list[Change]:
        return self._changes_log[since : since + limit]

    async def _decisions(self, query: DecisionQuery) -> list[Decision]:
        out = []
        for d in reversed(self._decision_log):
            if query.before_id is not None and d.id is not None and d.id >= query.before_id:
                continue
            if query.reasons and d.reason not in query.reasons:
                continue
            if any(
                want is not None and have != want
                for want, have in (
                    (query.source, d.source),
                    (query.tool, d.tool),
                    (query.verdict, d.verdict),
                    (query.agent, d.agent),
                    (query.plan, d.plan),
                )
            ):
                continue
            out.append(d)
            if len(out) >= query.limit:
                break
        return out

    async def _wait_for_change(self, since: int, timeout: float) -> None:
        await asyncio.sleep(min(self.poll_interval, timeout))
