"""`Store`: the synchronous twin of `AsyncStore`, for scripts, CLIs and sync frameworks.

It owns a private event loop on a daemon thread and runs the async store there, so sync code
(including code already inside another event loop's thread) can call it safely.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

from .batches import WriteBatch
from .journal import Entry as Decision
from .lineage import DEFAULT_MAX_RECORDS, Frontier
from .model import CURRENT, Change, KeyState, _Current
from .records import JSON, KIND_FACT, Record
from .store import AsyncStore

T = TypeVar("T")


class LoopThread:
    """An event loop running forever on a daemon thread."""

    def __init__(self, name: str = "planfence-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if threading.current_thread() is self._thread:
            raise RuntimeError("sync planfence call from inside its own loop thread")
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result(timeout)

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
        if not self.loop.is_running():
            self.loop.close()


class Store:
    """Synchronous store. Build with `planfence.shared_memory.open_store(url)`."""

    def __init__(self, inner: AsyncStore) -> None:
        self.aio = inner
        self._loop = LoopThread()
        self._closed = False
        try:
            self._loop.run(inner.setup())
        except BaseException:
            self._closed = True
            try:
                self._loop.run(inner.aclose())
            finally:
                self._loop.stop()
            raise

    @property
    def url(self) -> str:
        return self.aio.url

    def __repr__(self) -> str:
        return f"<Store {self.aio!r}>"

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self._loop.run(coro)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._run(self.aio.aclose())
            finally:
                self._loop.stop()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def own(self, key: str, owner: str, *, by: str | None = None) -> Change:
        return self._run(self.aio.own(key, owner, by=by))

    def transfer(self, key: str, new_owner: str, *, by: str) -> Change:
        return self._run(self.aio.transfer(key, new_owner, by=by))

    def owner(self, key: str) -> str | None:
        return self._run(self.aio.owner(key))

    def put(
        self,
        key: str,
        value: JSON,
        *,
        author: str,
        parents: Iterable[str] = (),
        kind: str = KIND_FACT,
        expected_head: str | _Current | None = CURRENT,
    ) -> Record:
        return self._run(
            self.aio.put(
                key, value, author=author, parents=parents, kind=kind, expected_head=expected_head
            )
        )

    def add(
        self,
        key: str,
        value: JSON,
        *,
        author: str,
        parents: Iterable[str] = (),
        kind: str = KIND_FACT,
        supersedes: str | None = None,
        decisions: Iterable[Decision] = (),
    ) -> Record:
        return self._run(
            self.aio.add(
                key,
                value,
                author=author,
                parents=parents,
                kind=kind,
                supersedes=supersedes,
                decisions=decisions,
            )
        )

    def advance(
        self,
        key: str,
        record_id: str,
        *,
        by: str,
        expected_head: str | None,
        decisions: Iterable[Decision] = (),
    ) -> Change:
        return self._run(
            self.aio.advance(
                key, record_id, by=by, expected_head=expected_head, decisions=decisions
            )
        )

    def write(self, batch: WriteBatch) -> list[Change]:
        return self._run(self.aio.write(batch))

    def get(self, record_id: str) -> Record:
        return self._run(self.aio.get(record_id))

    def resolve_id(self, ref: str) -> str:
        return self._run(self.aio.resolve_id(ref))

    def get_many(self, ids: Iterable[str]) -> dict[str, Record]:
        return self._run(self.aio.get_many(ids))

    def head(self, key: str) -> str | None:
        return self._run(self.aio.head(key))

    def heads(self, keys: Iterable[str]) -> dict[str, str | None]:
        return self._run(self.aio.heads(keys))

    def states(self, keys: Iterable[str]) -> dict[str, KeyState]:
        return self._run(self.aio.states(keys))

    def keys(self, prefix: str = "") -> list[KeyState]:
        return self._run(self.aio.keys(prefix))

    def frontier(
        self, roots: Iterable[str], scope: Iterable[str], *, max_records: int = DEFAULT_MAX_RECORDS
    ) -> Frontier:
        return self._run(self.aio.frontier(roots, scope, max_records=max_records))

    def lineage(self, record_id: str, *, max_records: int = DEFAULT_MAX_RECORDS) -> Frontier:
        return self._run(self.aio.lineage(record_id, max_records=max_records))

    def changes(self, since: int = 0, limit: int = 1000) -> list[Change]:
        return self._run(self.aio.changes(since, limit))

    def iter_changes(self, since: int = 0) -> Iterator[Change]:
        """Every change after `since` that exists now (does not wait for new ones)."""
        while batch := self.changes(since):
            yield from batch
            since = batch[-1].seq

    def log(self, decision: Decision) -> int:
        return self._run(self.aio.log(decision))

    def decisions(self, **filters: Any) -> list[Decision]:
        return self._run(self.aio.decisions(**filters))
