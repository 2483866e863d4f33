"""Head leases on PostgreSQL: read and written inside a write transaction that holds the touched
keys' advisory locks, so a lease and a head advance on one key are never decided concurrently."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

from ..leases import LeasePlan, LeaseRow
from .postgres_schema import _LEASES_SQL


async def _lease_rows(
    conn: psycopg.AsyncConnection[Any], keys: list[str]
) -> tuple[float, list[LeaseRow]]:
    """The server's clock and the keys' stored leases (the keys' advisory locks are held)."""
    found = await (await conn.execute(_LEASES_SQL, (keys,))).fetchall()
    now = float(found[0][0])
    return now, [LeaseRow(r[1], r[2], r[3], r[4], float(r[5])) for r in found if r[1] is not None]


async def _apply_leases(
    conn: psycopg.AsyncConnection[Any], keys: list[str], plan: LeasePlan, now: float
) -> None:
    await conn.execute("DELETE FROM pf_leases WHERE key = ANY(%s) AND expires <= %s", (keys, now))
    async with conn.cursor() as c:
        if plan.delete:
            await c.executemany("DELETE FROM pf_leases WHERE key = %s AND lease = %s", plan.delete)
        if plan.upsert:
            await c.executemany(
                "INSERT INTO pf_leases (key, lease, holder, kind, expires) "
                "VALUES (%s,%s,%s,%s,%s) ON CONFLICT (key, lease) DO UPDATE "
                "SET holder = excluded.holder, kind = excluded.kind, expires = excluded.expires",
                [(r.key, r.lease, r.holder, r.kind, r.expires) for r in plan.upsert],
            )
