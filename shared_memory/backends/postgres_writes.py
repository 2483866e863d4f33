"""The PostgreSQL store's writes: a batch checked and applied in one transaction.

The touched keys are locked with transaction-scoped advisory locks (which also covers keys that
do not exist yet), then the shared `plan_batch` checks run on what the transaction reads.
Transactions that append to the change feed also take the feed lock, so feed sequence numbers
become visible in commit order, and notify the schema's channel (a wake-up hint for readers).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..batches import WriteBatch, WriteResult, plan_batch
from ..lease_writes import needs_leases
from ..leases import LeaseRow
from ..model import KeyState
from .postgres_leases import _apply_leases, _lease_rows
from .postgres_rows import _append_args, _key_states
from .postgres_schema import _APPEND_SQL
from .sql import (
    KEY_COLS,
    RECORD_COLS,
    change_row,
    insert_change_sql,
    key_row,
    record_row,
    upsert_key_sql,
)

if TYPE_CHECKING:
    import psycopg

UPSERT_KEY = upsert_key_sql("pf_keys", "%s")
_INSERT_CHANGE = insert_change_sql("pf_changes", "%s")


@dataclass(frozen=True)
class LockNames:
    """What a schema's writers lock and notify: named after the schema, since advisory locks
    and channels are database-wide."""

    key_prefix: str
    feed: str
    channel: str


async def write_tx(
    conn: psycopg.AsyncConnection[Any], batch: WriteBatch, at: str, names: LockNames
) -> WriteResult:
    """Check and write `batch` in the transaction open on `conn` (see `PostgresStore`)."""
    keys = batch.keys()
    states: dict[str, KeyState] = {}
    if keys:
        # Taken in lock-id order, so two writers can never wait on each other.
        await conn.execute(
            "SELECT pg_advisory_xact_lock(h) FROM (SELECT DISTINCT "
            "hashtextextended(%s || k, 0) AS h FROM unnest(%s::text[]) AS k "
            "ORDER BY h) AS l",
            (names.key_prefix, keys),
        )
        cur = await conn.execute(f"SELECT {KEY_COLS} FROM pf_keys WHERE key = ANY(%s)", (keys,))
        states = {s.key: s for s in _key_states(await cur.fetchall())}
    found: dict[str, str] = {}
    wanted = sorted(batch.referenced_ids())
    if wanted:
        cur = await conn.execute("SELECT id, key FROM pf_records WHERE id = ANY(%s)", (wanted,))
        found = {r[0]: r[1] for r in await cur.fetchall()}
    record_keys = {**found, **{r.id: r.key for r in batch.records}}
    rows: list[LeaseRow] = []
    now = 0.0
    leased = needs_leases(batch)
    if leased:
        now, rows = await _lease_rows(conn, keys)
    planned = plan_batch(batch, states, set(found), record_keys, at, lease_rows=rows, now=now)
    if leased:
        await _apply_leases(conn, keys, planned.leases, now)
    if batch.records:
        async with conn.cursor() as c:
            await c.executemany(
                f"INSERT INTO pf_records ({RECORD_COLS}) "
                "VALUES (%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (id) DO NOTHING",
                [record_row(r, list(r.parents)) for r in batch.records],
            )
    for s in planned.new_states.values():
        await conn.execute(UPSERT_KEY, key_row(s))
    result = WriteResult()
    if planned.changes:
        await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (names.feed,))
        for ch in planned.changes:
            cur = await conn.execute(_INSERT_CHANGE + " RETURNING seq", change_row(ch))
            row = await cur.fetchone()
            assert row is not None  # RETURNING always yields the row
            result.changes.append(replace(ch, seq=int(row[0])))
        seq = str(result.changes[-1].seq)
        await conn.execute("SELECT pg_notify(%s, %s)", (names.channel, seq))
    for entry in batch.entries:
        cur = await conn.execute(_APPEND_SQL, _append_args(entry, at))
        row = await cur.fetchone()
        assert row is not None
        result.entry_ids.append(int(row[0]))
    return result
