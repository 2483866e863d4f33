"""`PlanfenceStore`: LangGraph's `BaseStore` API over planfence's shared memory.

Namespaces map to keys: `("trip", "42")` + `"requirements"` is the public key
`trip/42/requirements`. Every item read carries the record id it came from (`_record_id`), and
every read is remembered so a plan can cite exactly what its planner read. Writes publish a new
version as the store's agent, who must own the key; public records are immutable, so deleting is
refused.

Reads are remembered per unit of work, never per store object: a compiled graph serving many
runs at once keeps each run's reads apart. The unit is the innermost `track_reads()` block, or
else the LangGraph task (one node or tool step of one run) doing the reading, or else the asyncio
task or thread. `PlanfenceAgentMiddleware` and `PlanfenceToolNode` open a `track_reads()` block
around every tool call and carry what it read in graph state; a planner node calls `take_reads()` in
the node that read.

A LangGraph task's reads are kept in a registry keyed by the task (its `checkpoint_ns` and run
config, from `langgraph.config.get_config()`), so reads made in child tasks of a node
(`asyncio.gather(reader.aget(...), ...)`) land in the node's own log and `take_reads()` sees them
all, every version. Threads started by a node find it only if they run in a copy of the node's
context (`contextvars.copy_context().run(fn)`, or LangGraph's own executors, which copy it); a
bare `threading.Thread` or `ThreadPoolExecutor.submit(fn)` reads as a unit of its own, and its
reads are not the node's. A task's log leaves the registry when `take_reads()` empties it; at
most `MAX_TASK_LOGS` untaken logs are kept (the oldest are dropped first).
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime, timezone

from planfence.shared_memory import (
    AsyncStore,
    ConfigError,
    PlanfenceError,
    Record,
    Store,
)
from planfence.shared_memory.extras import extra_imports

with extra_imports("langgraph", "planfence.adapters.langgraph"):
    from langgraph.config import get_config
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

from planfence.plugins.gate.reads import ReadSet, add_reads
from planfence.shared_memory import StoreBridge

RECORD_ID = "_record_id"


class ImmutableRecordError(PlanfenceError):
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


@dataclass
class ReadLog:
    """Reads of one unit of work, per shared memory (the `AsyncStore` they came from)."""

    owner: Hashable
    by_store: dict[AsyncStore, ReadSet] = field(default_factory=dict)

    def add(self, store: AsyncStore, records: Iterable[Record]) -> None:
        with _LOCK:  # a tool may read from several threads at once
            add_reads(self.by_store.setdefault(store, {}), ((r.key, r.id) for r in records))

    def get(self, store: AsyncStore | Store) -> ReadSet:
        """A copy of what was read from `store` in this unit of work."""
        with _LOCK:
            return {k: list(v) for k, v in self.by_store.get(_aio(store), {}).items()}

    def take(self, store: AsyncStore | Store) -> ReadSet:
        with _LOCK:
            taken = self.by_store.pop(_aio(store), {})
            if not self.by_store and _TASK_LOGS.get(self.owner) is self:
                del _TASK_LOGS[self.owner]  # nothing left to take: the task is done with it
            return taken


def _aio(store: AsyncStore | Store) -> AsyncStore:
    return store.aio if isinstance(store, Store) else store


_EXPLICIT = object()
_LOCK = threading.Lock()
_LOG: ContextVar[ReadLog | None] = ContextVar("planfence_reads", default=None)

MAX_TASK_LOGS = 4096
"""How many LangGraph tasks' untaken read logs the registry keeps."""
_TASK_LOGS: OrderedDict[Hashable, ReadLog] = OrderedDict()


def _unit() -> Hashable:
    """The unit of work reading now: the LangGraph task, else the asyncio task, else the thread.

    Contexts are copied into child tasks, so a log can be visible where it does not belong (a
    node inherits its caller's); comparing owners keeps such an inherited log out of use.
    """
    try:
        config = get_config()
    except RuntimeError:  # not inside a LangGraph run
        config = None
    namespace = (config or {}).get("configurable", {}).get("checkpoint_ns")
    if namespace:
        # The namespace names the task (subgraphs included); the config object is the one this
        # task and every child task it starts share, which sets a replay of the task apart.
        return ("langgraph", namespace, id(config))
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    return ("asyncio", task) if task is not None else ("thread", threading.get_ident())


def _current(create: bool) -> ReadLog | None:
    log = _LOG.get()
    if log is not None and log.owner is _EXPLICIT:
        return log
    owner = _unit()
    if log is not None and log.owner == owner:
        return log
    if isinstance(owner, tuple) and owner[0] == "langgraph":
        return _task_log(owner, create)
    if not create:
        return None
    log = ReadLog(owner)
    _LOG.set(log)
    return log


def _task_log(owner: Hashable, create: bool) -> ReadLog | None:
    """The one log of a LangGraph task, shared by the child tasks it starts."""
    with _LOCK:
        log = _TASK_LOGS.get(owner)
        if log is None:
            if not create:
                return None
            log = _TASK_LOGS[owner] = ReadLog(owner)
            while len(_TASK_LOGS) > MAX_TASK_LOGS:
                _TASK_LOGS.popitem(last=False)
    _LOG.set(log)
    return log


@contextmanager
def track_reads() -> Iterator[ReadLog]:
    """Collect every read through a `PlanfenceStore` inside the block (and in tasks it starts)
    in a log of its own, apart from any enclosing unit of work."""
    log = ReadLog(_EXPLICIT)
    token = _LOG.set(log)
    try:
        yield log
    finally:
        _LOG.reset(token)


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

    # ---- read tracking (per unit of work, see the module docstring)

    def note_reads(self, records: Iterable[Record]) -> None:
        """Remember that the current unit of work read `records`, every version of every key."""
        records = list(records)
        if records:
            log = _current(create=True)
            assert log is not None
            log.add(self.bridge.aio, records)

    @property
    def reads(self) -> ReadSet:
        """key -> record ids this unit of work read through this store since `take_reads`."""
        log = _current(create=False)
        return log.get(self.bridge.aio) if log is not None else {}

    def take_reads(self) -> ReadSet:
        """The reads of this unit of work (see `reads`), forgotten once taken."""
        log = _current(create=False)
        return log.take(self.bridge.aio) if log is not None else {}

    # ---- BaseStore

    # Reads are noted here, in the caller's context: a sync store runs `_apply` on its own loop
    # thread, whose context belongs to no run.

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        results, read = self.bridge.call(lambda store: self._apply(store, ops))
        self.note_reads(read)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        results, read = await self.bridge.acall(lambda store: self._apply(store, ops))
        self.note_reads(read)
        return results

    async def _apply(self, store: AsyncStore, ops: list[Op]) -> tuple[list[Result], list[Record]]:
        results: list[Result] = []
        read: list[Record] = []
        for op in ops:
            if isinstance(op, GetOp):
                results.append(await self._get(store, op, read))
            elif isinstance(op, SearchOp):
                results.append(await self._search(store, op, read))
            elif isinstance(op, PutOp):
                await self._put(store, op)
                results.append(None)
            elif isinstance(op, ListNamespacesOp):
                results.append(await self._namespaces(store, op))
            else:
                raise ConfigError(f"unsupported store operation {type(op).__name__}")
        return results, read

    async def _get(self, store: AsyncStore, op: GetOp, read: list[Record]) -> Item | None:
        key = key_of(op.namespace, op.key)
        head = (await store.heads([key])).get(key)
        if head is None:
            return None
        record = await store.get(head)
        read.append(record)
        return to_item(record)

    async def _search(
        self, store: AsyncStore, op: SearchOp, read: list[Record]
    ) -> list[SearchItem]:
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
        read.extend(records)
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
