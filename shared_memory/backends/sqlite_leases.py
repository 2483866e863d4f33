"""Head leases on SQLite: read and written inside the write transaction (`BEGIN IMMEDIATE`), so
a lease and a head advance are never decided concurrently, across processes too."""

from __future__ import annotations

import json
import sqlite3

from ..leases import LeasePlan, LeaseRow


def _lease_rows(conn: sqlite3.Connection, keys: list[str]) -> list[LeaseRow]:
    rows = conn.execute(
        "SELECT key, lease, holder, kind, expires FROM leases "
        "WHERE key IN (SELECT value FROM json_each(?))",
        (json.dumps(keys),),
    )
    return [LeaseRow(*r) for r in rows]


def _apply_leases(conn: sqlite3.Connection, keys: list[str], plan: LeasePlan, now: float) -> None:
    conn.execute(
        "DELETE FROM leases WHERE key IN (SELECT value FROM json_each(?)) AND expires <= ?",
        (json.dumps(keys), now),
    )
    conn.executemany("DELETE FROM leases WHERE key = ? AND lease = ?", plan.delete)
    conn.executemany(
        "INSERT OR REPLACE INTO leases (key, lease, holder, kind, expires) VALUES (?,?,?,?,?)",
        [(r.key, r.lease, r.holder, r.kind, r.expires) for r in plan.upsert],
    )
