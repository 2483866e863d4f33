"""`JanusStore`: Janus in front of the LangGraph store a team already keeps its memories in.

    store = JanusStore(InMemoryStore(), namespace=("memories", "team"), controller=controller,
                       records=planfence_store)
    with store.working_on(task):              # the task the memory update follows
        await store.aput(("memories", "team"), "m1", {"content": "..."})

Writes (puts and deletes) under the gated namespace are candidates: the memory under that
namespace with the write applied is judged by the controller against the memory as it is, and
the write reaches the wrapped store only when it is deployed. A rejected write never reaches it,
so `get`/`search` (through the wrapper or on the wrapped store directly) only ever see deployed
memories. Everything else, reads included, passes through untouched. The data stays where it
was: the wrapped store holds the memories, planfence's store holds the Janus bookkeeping, the
same a `JanusStoreHook` writes (every candidate a record of the key named after the namespace,
every decision in the log, `planfence audit --source janus`, and the controller's state, from
which a restarted wrapper continues).

The memory the controller sees is the list of the namespace's items, oldest first, each
`{"namespace": [...], "key": ..., "value": {...}}`; a controller built with the default render
gets `render_items` (one line per item: its text content), which is what encoders should read.
The task a write follows is the one set by `working_on(task)`; outside such a block it is a task
made from the written text.

A deployed write is judged and recorded before it is applied to the wrapped store: if the
process dies in between, the decision is on record and the write is not in the store (write it
again; Janus judges it against the memory as it is).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from planfence.plugins.janus import JanusController, JanusStoreHook, Task
from planfence.plugins.janus.memory import Memory, render_memory
from planfence.plugins.janus.store_hook import Submission, current_task
from planfence.plugins.janus.store_hook import working_on as _working_on
from planfence.shared_memory import AsyncStore, ConfigError, Store, StoreBridge
from planfence.shared_memory.extras import extra_imports
from planfence.shared_memory.records import canonical_json

with extra_imports("langgraph", "planfence.adapters.langgraph"):
    from langgraph.store.base import BaseStore, Item, Op, PutOp, Result

PAGE = 1000
"""Items read per search while collecting the gated memory."""


def item_text(value: Any) -> str:
    """The text of one memory item: LangMem's `{"content": {"content": text}}`, a `content` or
    `text` field, else the value as JSON."""
    if isinstance(value, dict):
        content = value.get("content", value.get("text"))
        if isinstance(content, dict) and isinstance(content.get("content"), str):
            return str(content["content"])
        if isinstance(content, str):
            return content
    return str(canonical_json(value))


def render_items(memory: Memory) -> str:
    """A gated namespace's memory as text: one line per item."""
    if not isinstance(memory, list):
        return render_memory(memory)
    return "\n".join(f"- {item_text(i.get('value'))}" for i in memory if isinstance(i, dict))


def _entry(item: Item) -> dict[str, Any]:
    return {"namespace": list(item.namespace), "key": item.key, "value": dict(item.value)}


def _memory_of(items: Iterable[Item]) -> list[dict[str, Any]]:
    ordered = sorted(items, key=lambda i: (i.created_at, i.namespace, i.key))
    return [_entry(i) for i in ordered]


def _applied(memory: list[dict[str, Any]], op: PutOp) -> list[dict[str, Any]]:
    """The memory with one put (or delete, `value=None`) applied: an update keeps its place."""
    where = [list(op.namespace), op.key]
    out = [dict(i) for i in memory if [i["namespace"], i["key"]] != where]
    if op.value is None:
        return out
    entry = {"namespace": where[0], "key": op.key, "value": dict(op.value)}
    at = next((n for n, i in enumerate(memory) if [i["namespace"], i["key"]] == where), None)
    out.insert(len(out) if at is None else at, entry)
    return out


class JanusStore(BaseStore):
    """A LangGraph `BaseStore` whose writes under `namespace` pass through a Janus controller.

    Args:
        store: the wrapped LangGraph store (InMemoryStore, PostgresStore, ...), which keeps the
            deployed memories.
        namespace: the gated namespace; it and every namespace below it form one memory.
        controller: the `JanusController` that judges each write.
        records: planfence's store (sync `Store` or `AsyncStore`) for candidates, decisions and
            the controller's state.
        owner: the agent that owns the memory's keys in `records`.
        key: the memory's key in `records` (default: the namespace joined with `/`).
        author: whom candidates are attributed to (default: `owner`).
    """

    def __init__(
        self,
        store: BaseStore,
        *,
        namespace: tuple[str, ...],
        controller: JanusController,
        records: AsyncStore | Store,
        owner: str = "janus",
        key: str | None = None,
        author: str | None = None,
    ) -> None:
        namespace = tuple(namespace)
        if not namespace or not all(isinstance(p, str) and p for p in namespace):
            raise ConfigError(f"the gated namespace needs non-empty labels, got {namespace!r}")
        self.store = store
        self.namespace = namespace
        self.controller = controller
        if controller.render is render_memory:
            controller.render = render_items
        self.bridge = StoreBridge(records)
        self.author = author
        self.hook = JanusStoreHook(
            self.bridge.aio, key or "/".join(namespace), controller, owner=owner, initial=[]
        )
        self.supports_ttl = store.supports_ttl
        self.ttl_config = store.ttl_config
        self._alock = asyncio.Lock()
        self._lock = threading.Lock()
        self.last: Submission | None = None
        """The latest judged write (its record, verdict and decision)."""

    # ---- the task a write follows

    @staticmethod
    def working_on(task: Task) -> AbstractContextManager[Task]:
        """Writes inside the block follow `task` (in this context and tasks it starts)."""
        return _working_on(task)

    def gated(self, namespace: tuple[str, ...]) -> bool:
        return tuple(namespace[: len(self.namespace)]) == self.namespace

    def _task_for(self, op: PutOp) -> Task:
        task = current_task()
        if task is not None:
            return task
        text = "" if op.value is None else item_text(dict(op.value))
        return Task.create(text or f"delete {'/'.join(op.namespace)}/{op.key}")

    # ---- BaseStore

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        results: list[Result] = []
        for run, gated in self._runs(ops):
            if not gated:
                results.extend(self.store.batch(run))
                continue
            for op in run:
                assert isinstance(op, PutOp)
                task = self._task_for(op)
                with self._lock:
                    memory = _memory_of(self._read_sync())
                    submission = self.bridge.run(self._judge, memory, op, task)
                    if submission.verdict.deploy:
                        self.store.batch([op])
                results.append(None)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        results: list[Result] = []
        for run, gated in self._runs(ops):
            if not gated:
                results.extend(await self.store.abatch(run))
                continue
            for op in run:
                assert isinstance(op, PutOp)
                task = self._task_for(op)
                async with self._alock:
                    memory = _memory_of(await self._read_async())
                    submission = await self.bridge.acall(self._ajudge, memory, op, task)
                    if submission.verdict.deploy:
                        await self.store.abatch([op])
                results.append(None)
        return results

    # ---- internals

    def _runs(self, ops: Sequence[Op]) -> Iterator[tuple[list[Op], bool]]:
        """Consecutive ops grouped: gated writes, or everything else (passed on as one batch)."""
        run: list[Op] = []
        kind = False
        for op in ops:
            gated = isinstance(op, PutOp) and self.gated(op.namespace)
            if run and gated != kind:
                yield run, kind
                run = []
            run.append(op)
            kind = gated
        if run:
            yield run, kind

    def _read_sync(self) -> list[Item]:
        items: list[Item] = []
        while True:
            page = self.store.search(
                self.namespace, limit=PAGE, offset=len(items), refresh_ttl=False
            )
            items.extend(page)
            if len(page) < PAGE:
                return items

    async def _read_async(self) -> list[Item]:
        items: list[Item] = []
        while True:
            page = await self.store.asearch(
                self.namespace, limit=PAGE, offset=len(items), refresh_ttl=False
            )
            items.extend(page)
            if len(page) < PAGE:
                return items

    async def _ajudge(
        self, _: AsyncStore, memory: list[dict[str, Any]], op: PutOp, task: Task
    ) -> Submission:
        return await self._judge(memory, op, task)

    async def _judge(self, memory: list[dict[str, Any]], op: PutOp, task: Task) -> Submission:
        candidate = _applied(memory, op)
        submission = await self.hook.submit(candidate, task, author=self.author, current=memory)
        self.last = submission
        return submission

    async def decisions(self, limit: int = 100) -> list[Any]:
        """Janus decisions for this memory, newest first."""
        return await self.bridge.acall(lambda _: self.hook.decisions(limit))
