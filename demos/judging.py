"""Judging a workflow's actions from the store's history, never from an executor's verdict: an
action is valid iff its plan used exactly the heads of D(a) when the tool ran. And what changed,
in values, between the version a plan used and the current one."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from planfence.plugins.gate import Policy
from planfence.shared_memory import JSON, AsyncStore, Change, UnknownRecordError


@dataclass
class ActionLog:
    tool: str
    args: dict[str, Any]
    plan_id: str | None
    seq: int  # the last feed entry when the tool ran
    verdict: str


@dataclass(frozen=True)
class Judgement:
    """Whether an action was valid, and for each key in its scope the versions its plan used and
    the head when the tool ran."""

    valid: bool
    used: Mapping[str, frozenset[str]] = field(default_factory=dict)
    heads: Mapping[str, str | None] = field(default_factory=dict)

    @property
    def stale(self) -> list[str]:
        return [k for k, ids in self.used.items() if ids != {self.heads.get(k)}]


_FEED_BATCH = 1000


def heads_as_of(changes: Iterable[Change], seq: int) -> dict[str, str | None]:
    """Every key's head right after feed entry `seq`, replayed from the change feed (the entries
    before the first one given are taken as already applied)."""
    heads: dict[str, str | None] = {}
    for ch in changes:
        if ch.seq > seq:
            break
        if ch.kind == "head":
            heads[ch.key] = ch.head
    return heads


async def feed_between(store: AsyncStore, since: int, until: int | None = None) -> list[Change]:
    """The feed entries after `since` (up to `until`, inclusive): bounded by the entries in that
    window, whatever the store's history before it."""
    out: list[Change] = []
    while batch := await store.changes(since, _FEED_BATCH):
        for ch in batch:
            if until is not None and ch.seq > until:
                return out
            out.append(ch)
        since = batch[-1].seq
        if len(batch) < _FEED_BATCH or since == until:  # the end of the feed, or of the window
            break
    return out


async def feed_end(store: AsyncStore, since: int) -> int:
    """The last feed entry, reading forward from `since` (a recent entry) rather than from 0."""
    changes = await feed_between(store, since)
    return changes[-1].seq if changes else since


async def used_versions(
    store: AsyncStore, root: str, scope: tuple[str, ...]
) -> dict[str, set[str]]:
    """Which versions of each scope key the plan `root` used, by walking its parents one level
    at a time: written apart from the gate's own walk, so the judge does not share its bugs.

    Raises:
        UnknownRecordError: a record of the lineage that the store does not hold.
    """
    used: dict[str, set[str]] = {k: set() for k in scope}
    seen: set[str] = set()
    level = [root]
    while level:
        wanted = [rid for rid in dict.fromkeys(level) if rid not in seen]
        seen.update(wanted)
        found = await store.get_many(wanted)
        missing = [rid for rid in wanted if rid not in found]
        if missing:
            raise UnknownRecordError(missing)
        level = []
        for rid in wanted:
            rec = found[rid]
            if rec.key in used:
                used[rec.key].add(rid)
            else:
                level.extend(rec.parents)
    return used


async def judge(
    store: AsyncStore, policy: Policy, action: ActionLog, *, since: int = 0
) -> Judgement:
    """Valid iff the plan behind the arguments had F(x) == {H(x)} for every x in D(a) when the
    tool ran, by the store's history: the feed after `since` replayed up to the action.

    `since` must precede every change to the action's scope keys (the start of the run that
    created them); the judge reads the records the plan used and the feed after `since` only.
    """
    if action.plan_id is None:
        return Judgement(False)
    tool = policy.get(action.tool)
    if tool is None or tool.ungated:
        return Judgement(False)
    scope = tool.scope(action.args)
    if not scope:
        return Judgement(False)
    used = await used_versions(store, action.plan_id, scope)
    all_heads = heads_as_of(await feed_between(store, since, action.seq), action.seq)
    heads = {k: all_heads.get(k) for k in scope}
    valid = all(used[k] == {heads[k]} for k in scope)
    return Judgement(valid, {k: frozenset(v) for k, v in used.items()}, heads)


# --- what changed, in values ------------------------------------------------------------------


def value_changes(old: JSON, new: JSON) -> dict[str, list[JSON]]:
    """Field -> [old, new] for the fields that differ (`""` for a value that is not an object)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return {
            k: [old.get(k), new.get(k)]
            for k in sorted(old.keys() | new.keys())
            if old.get(k) != new.get(k)
        }
    return {} if old == new else {"": [old, new]}


def _show(value: JSON) -> str:
    if value is None:
        return "(none)"
    return value if isinstance(value, str) else json.dumps(value)


def describe_change(change: Mapping[str, Any]) -> str:
    """`trip/42/requirements: destination Lisbon -> Porto`."""
    fields = change.get("changed") or {}
    parts = [
        f"{name + ' ' if name else ''}{_show(old)} -> {_show(new)}"
        for name, (old, new) in fields.items()
    ]
    if not parts:  # same content, or a record the store no longer answers for
        used = (change.get("used") or ["none"])[0][:10]
        parts = [f"{used} -> {(change.get('current') or 'none')[:10]}"]
    return f"{change['key']}: {', '.join(parts)}"


async def changes_since_plan(
    store: AsyncStore, stale: Iterable[tuple[str, Iterable[str], str | None]]
) -> list[dict[str, Any]]:
    """For each (key, versions the plan used, current head): the record ids and the changed
    field values of the version the plan used against the current one."""
    rows = [(k, sorted(used), cur) for k, used, cur in stale]
    ids = {i for _, used, cur in rows for i in [*used[:1], cur] if i}
    records = await store.get_many(ids)
    out = []
    for key, used, cur in rows:
        old = records.get(used[0]) if used else None
        new = records.get(cur) if cur else None
        changed = value_changes(old.value, new.value) if old and new else {}
        out.append({"key": key, "used": used, "current": cur, "changed": changed})
    return out
