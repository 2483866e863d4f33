"""The owner team `bench gate` and `bench link` run against: two owners answering for keys that
alternate between them, a requesting executor, and plans at a given lineage depth."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from planfence.plugins.gate import create_plan
from planfence.shared_memory import AsyncStore

from . import services

OWNERS = ("owner-a", "owner-b")
REQUESTER = "executor"


def owner_of(i: int) -> str:
    """The owner of key number `i`: owners take turns."""
    return OWNERS[i % len(OWNERS)]


async def seed_keys(store: AsyncStore, prefix: str, n: int) -> list[str]:
    """n owned keys under `prefix`, owners alternating, one fact each; their record ids."""
    facts = []
    for i in range(n):
        key = f"{prefix}/k{i:03d}"
        await store.own(key, owner_of(i))
        facts.append((await store.put(key, {"i": i}, author=owner_of(i))).id)
    return facts


async def plan_at_depth(store: AsyncStore, facts: list[str], depth: int, tag: str) -> str:
    """A plan `depth` derived records above `facts` (1: the plan cites the facts)."""
    parents = facts
    for level in range(depth - 1):
        note = await store.add(
            f"bench/derived/{tag}",
            {"level": level},
            author=OWNERS[0],
            parents=parents,
            kind="derived",
        )
        parents = [note.id]
    return (await create_plan(store, author=OWNERS[0], parents=parents, value={"tag": tag})).id


@contextmanager
def owner_services(
    store_url: str, keyring: Mapping[str, str], logs: Path
) -> Iterator[dict[str, str]]:
    """One owner service process per owner over `store_url`; yields owner -> base URL."""
    specs = {owner: services.owner_service(owner, store_url, keyring) for owner in OWNERS}
    with services.running(specs, logs) as urls:
        yield urls
