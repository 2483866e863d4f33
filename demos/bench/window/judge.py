"""On-stale effects, judged from the store's history alone: the change feed replayed in order.

For each effect (a head change on an effects key), the head its key had at that point of the
feed is compared with the version its plan used (the plan's parents), read from the records."""

from __future__ import annotations

from dataclasses import dataclass

from planfence.shared_memory import AsyncStore

from .workers import OWNER


@dataclass
class Judged:
    effects: int = 0
    on_stale: int = 0


async def judge_history(store: AsyncStore, mode: str) -> Judged:
    data_prefix, effects_prefix = f"window/{mode}/item/", f"window/{mode}/effects/"
    heads: dict[str, str | None] = {}
    out = Judged()
    since = 0
    while batch := await store.changes(since, 5000):
        since = batch[-1].seq
        effects = [c for c in batch if c.kind == "head" and c.key.startswith(effects_prefix)]
        records = await store.get_many([c.head for c in effects if c.head])
        plans = await store.get_many([p for r in records.values() for p in r.parents])
        used = await store.get_many([p for r in plans.values() for p in r.parents])
        for change in batch:
            if change.kind != "head":
                continue
            if change.key.startswith(data_prefix) and change.by == OWNER:
                heads[change.key] = change.head
            elif change.key.startswith(effects_prefix) and change.head in records:
                out.effects += 1
                plan = plans[records[change.head].parents[0]]
                for parent in plan.parents:
                    version = used[parent]
                    if heads.get(version.key) != version.id:
                        out.on_stale += 1
                        break
    return out
