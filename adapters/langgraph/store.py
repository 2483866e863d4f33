"""`PlanfenceStore`: LangGraph's `BaseStore` API over planfence's shared memory.

Namespaces map to keys: `("trip", "42")` + `"requirements"` is the public key
`trip/42/requirements`. Every item read carries the record id it came from (`_record_id`), and
every read is remembered (`take_reads`) so a plan can cite exactly what its planner read. Writes
publish a new version as the store's agent, who must own the key; public records are immutable,
so deleting is refused.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from datetime import datetime, timezone

from planfence.shared_memory import (
    AsyncStore,
    ConfigError,
    MissingExtraError,
    PlanFenceError,
    Record,
    Store,
)

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        Item,
        ListNamespacesOp,
        Op,
        PutOp,
        Result,
        SearchItem,
        SearchOp,
    )
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise MissingExtraError("planfence.adapters.langgraph", "langgraph") from exc

from ._fence import StoreBridge

RECORD_ID = "_record_id"


class ImmutableRecordError(PlanFenceError):
    """Public records cannot be deleted; publish a new version instead."""


def key_of(namespace: tuple[str, ...], key: str) -> str:
    return "/".join((*namespace, key))


def split_key(full: str) -> tuple[tuple[str, ...], str]:
    *namespace, key = full.split("/")
    return tuple(namespace), key


def _time(text: str) -> datetime:
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return datetime.now(timezone.utc)


def to_item(record: Record, cls: type[Item] = Item) -> Item:
    value = dict(record.value) if isinstance(record.value, dict) else {"value": record.value}
    value[RECORD_ID] = record.id
    namespace, key = split_key(record.key)
    at = _time(record.created_at)
    return cls(value=value, key=key, namespace=namespace, created_at=at, updated_at=at)


class PlanfenceStore(BaseStore):
    """A LangGraph store whose items are the current versions of public records.

    Args:
        store: a sync `Store` (works from sync and async graphs) or an `AsyncStore`.
        agent: who `put` publishes as; it must own the keys it writes (or pass `claim=True`).
        claim: take ownership of a key with no owner on first write.
    """

    supports_ttl = False

    def __init__(
        self, store: AsyncStore | Store, *, agent: str | None = None, claim: bool = False
    ) -> None:
        self.bridge = StoreBridge(store)
        self.agent = agent
        self.claim = claim
        self._reads: dict[str, str] = {}
        self._lock = threading.Lock()

    # ---- read tracking

    def note_reads(self, records: Iterable[Record]) -> None:
        with self._lock:
            for r in records:
                self._reads.pop(r.key, None)  # keep the newest read last
                self._reads[r.key] = r.id

    @property
    def reads(self) -> dict[str, str]:
        """key -> record id of everything read since the last `take_reads`."""
        with self._lock:
            return dict(self._reads)

    def take_reads(self) -> dict[str, str]:
        with self._lock:
            out, self._reads = self._reads, {}
            return out

    # ---- BaseStore

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        return self.bridge.call(lambda store: self._apply(store, ops))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        return await self.bridge.acall(lambda store: self._apply(store, ops))

    async def _apply(self, store: AsyncStore, ops: list[Op]) -> list[Result]:
        results: list[Result] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(await self._get(store, op))
            elif isinstance(op, SearchOp):
                results.append(await self._search(store, op))
            elif isinstance(op, PutOp):
                await self._put(store, op)
                results.append(None)
            elif isinstance(op, ListNamespacesOp):
                results.append(await self._namespaces(store, op))
            else:
                raise ConfigError(f"unsupported store operation {type(op).__name__}")
        return results

    async def _get(self, store: AsyncStore, op: GetOp) -> Item | None:
        key = key_of(op.namespace, op.key)
        head = (await store.heads([key])).get(key)
        if head is None:
            return None
        record = await store.get(head)
        self.note_reads([record])
        return to_item(record)

    async def _search(self, store: AsyncStore, op: SearchOp) -> list[SearchItem]:
        if op.query:
            raise ConfigError("PlanfenceStore has no semantic index: search by namespace")
        prefix = "/".join(op.namespace_prefix)
        states = await store.keys(prefix + "/" if prefix else "")
        ids = [s.head for s in sorted(states, key=lambda s: s.key) if s.head is not None]
        found = await store.get_many(ids)
        records = [found[i] for i in ids if i in found]
        if op.filter:
            records = [
                r
                for r in records
                if isinstance(r.value, dict)
                and all(r.value.get(k) == v for k, v in op.filter.items())
            ]
        records = records[op.offset : op.offset + op.limit]
        self.note_reads(records)
        return [to_item(r, SearchItem) for r in records]  # type: ignore[misc]

    async def _put(self, store: AsyncStore, op: PutOp) -> None:
        key = key_of(op.namespace, op.key)
        if op.value is None:
            raise ImmutableRecordError(
                f"cannot delete {key}: public records are immutable; publish a new version"
            )
        if self.agent is None:
            raise ConfigError("PlanfenceStore needs agent= to publish records")
        value = {k: v for k, v in op.value.items() if k != RECORD_ID}
        if self.claim and await store.owner(key) is None:
            await store.own(key, self.agent)
        await store.put(key, value, author=self.agent)

    async def _namespaces(self, store: AsyncStore, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        spaces = sorted({split_key(s.key)[0] for s in await store.keys("")})
        for cond in op.match_conditions or ():
            path = tuple(cond.path)

            def match(
                ns: tuple[str, ...], path: tuple[str, ...] = path, kind: str = cond.match_type
            ) -> bool:
                part = ns[: len(path)] if kind == "prefix" else ns[len(ns) - len(path) :]
                return len(ns) >= len(path) and all(
                    p in ("*", n) for p, n in zip(path, part, strict=False)
                )

            spaces = [ns for ns in spaces if match(ns)]
        if op.max_depth is not None:
            spaces = sorted({ns[: op.max_depth] for ns in spaces})
        return spaces[op.offset : op.offset + op.limit]
