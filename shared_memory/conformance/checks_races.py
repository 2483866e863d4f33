"""Writers on separate stores of one place race to advance one key (backends that declare
`shared_writers`: several processes may open the same place and write).

Each writer is its own store (its own connection, as a process would have), reading the head and
then advancing it with compare-and-set, retrying on `HeadConflictError`. The check first proves the
writers contended (some compare-and-set failed because another writer got there first), then that
nothing was lost: every success is on one linear chain, the feed moves the head from each previous
head, and the key's version counts the successes.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

from ..errors import HeadConflictError
from ..store import AsyncStore
from .runner import Check, CheckSkipped, Context

KEY = "race/counter"
WRITERS = 4
ADVANCES = 8
ROUNDS = 5  # a round without any contention proves nothing; race again, at most this often


async def _writer(store: AsyncStore, name: str, n: int) -> tuple[list[str], int]:
    ids: list[str] = []
    conflicts = 0
    while len(ids) < n:
        head = await store.head(KEY)
        await asyncio.sleep(0)  # let the other writers read the same head
        try:
            rec = await store.put(
                KEY,
                {"writer": name, "i": len(ids)},
                author="owner",
                parents=[head] if head else [],
                expected_head=head,
            )
        except HeadConflictError as exc:
            conflicts += 1
            moved = exc.current
        else:
            ids.append(rec.id)
            continue
        assert moved != head, "a conflict must name a head other than the expected one"
    return ids, conflicts


async def concurrent_writers_lose_no_update(store: AsyncStore, ctx: Context) -> None:
    if not store.shared_writers:
        raise CheckSkipped("the backend does not declare shared writers")
    await store.own(KEY, "owner")
    start = (await store.changes())[-1].seq
    successes: list[str] = []
    per_writer: list[list[str]] = []
    conflicts = 0
    for _ in range(ROUNDS):
        async with AsyncExitStack() as opened:
            writers = [await opened.enter_async_context(ctx.open()) for _ in range(WRITERS)]
            results = await asyncio.gather(
                *(_writer(w, f"w{i}", ADVANCES) for i, w in enumerate(writers))
            )
        for ids, lost in results:
            successes += ids
            per_writer.append(ids)
            conflicts += lost
        if conflicts:
            break
    assert conflicts > 0, f"{WRITERS} writers never contended in {ROUNDS} rounds"
    assert len(successes) == len(set(successes))

    feed = [c for c in await store.changes(start) if c.key == KEY]
    assert [c.kind for c in feed] == ["head"] * len(successes), "an advance is missing"
    previous = None
    for c in feed:
        assert c.previous == previous, "the head forked: an advance did not build on the last"
        previous = c.head
    head = await store.head(KEY)
    assert previous == head
    assert sorted(c.head for c in feed if c.head) == sorted(successes), "an update was lost"
    assert (await store.states([KEY]))[KEY].version == len(successes)
    records = await store.get_many(successes)
    chain, cur = [], head
    while cur is not None:  # the parent links are the feed's order
        chain.append(cur)
        parents = records[cur].parents
        assert len(parents) <= 1
        cur = parents[0] if parents else None
    assert chain[::-1] == [c.head for c in feed]
    for ids in per_writer:  # each writer's own records keep its order
        assert [records[i].value["i"] for i in ids] == list(range(len(ids)))


RACE_CHECKS: tuple[Check, ...] = (concurrent_writers_lose_no_update,)
