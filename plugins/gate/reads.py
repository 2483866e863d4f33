"""Read sets: which versions of which public records a planner read, and so what its plan cites.

A read set maps each key to every version of it that was read, oldest first. A plan cites them
all: if a planner saw two versions of one key, the gate must see both and judge the plan stale,
so no read is ever dropped in favour of a newer one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from planfence.shared_memory import AsyncStore, Record

ReadSet = dict[str, list[str]]
"""key -> record ids read for it, in the order they were first read."""


async def read_heads(
    store: AsyncStore, keys: Sequence[str], prefixes: Sequence[str] = ()
) -> list[Record]:
    """The current record of every key in `keys` or under `prefixes` that has one, by key."""
    heads = await store.heads(list(keys))
    for prefix in prefixes:
        heads.update({s.key: s.head for s in await store.keys(prefix)})
    ids = [h for _, h in sorted(heads.items()) if h is not None]
    found = await store.get_many(ids)
    return [found[i] for i in ids if i in found]


def add_reads(reads: ReadSet, pairs: Iterable[tuple[str, str]]) -> ReadSet:
    """Add (key, record id) pairs to `reads` in place, keeping every distinct version."""
    for key, record_id in pairs:
        versions = reads.setdefault(key, [])
        if record_id not in versions:
            versions.append(record_id)
    return reads


def reads_of(records: Iterable[Record]) -> ReadSet:
    return add_reads({}, ((r.key, r.id) for r in records))


def merge_reads(*sets: Mapping[str, str | Sequence[str]] | None) -> ReadSet:
    """One read set holding every version found in `sets` (a bare id counts as one version)."""
    out: ReadSet = {}
    for reads in sets:
        for key, ids in (reads or {}).items():
            add_reads(out, ((key, i) for i in ([ids] if isinstance(ids, str) else ids)))
    return out


def parents_of(reads: Mapping[str, str | Sequence[str]]) -> list[str]:
    """The record ids a plan cites for `reads`: every version of every key, each once."""
    return list(dict.fromkeys(i for ids in merge_reads(reads).values() for i in ids))


def refreshed(
    reads: Mapping[str, Sequence[str]] | None, current: Mapping[str, str | None]
) -> ReadSet:
    """The reads a replan starts from: the refusal showed each changed key's current version,
    which takes the place of every version read of it before."""
    out = {k: list(v) for k, v in (reads or {}).items() if k not in current}
    out.update({k: [head] for k, head in current.items() if head is not None})
    return out


__all__ = [
    "ReadSet",
    "add_reads",
    "merge_reads",
    "parents_of",
    "read_heads",
    "reads_of",
    "refreshed",
]
