"""The PostgreSQL store's reads: the statement answering each read op, and how its rows parse."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..reads import (
    GetChanges,
    GetKeys,
    GetOwnerChanges,
    GetRecords,
    IdsWithPrefix,
    Lineage,
    ListKeys,
    QueryJournal,
    ReadOp,
)
from .postgres_rows import _changes, _key_states, _stored_rows
from .postgres_schema import _PREFETCH_SQL
from .sql import (
    CHANGE_COLS,
    JOURNAL_COLS,
    KEY_COLS,
    RECORD_COLS,
    entry_from_row,
    journal_filter,
    owner_changes_sql,
)


def read_sql(op: ReadOp) -> tuple[str, Sequence[Any], Callable[[list[Any]], Any]]:
    """The statement answering `op`, its arguments, and how to parse its rows."""
    states = _key_states
    if isinstance(op, GetRecords):
        sql = f"SELECT {RECORD_COLS} FROM pf_records WHERE id = ANY(%s)"
        return sql, (list(op.ids),), _stored_rows
    if isinstance(op, Lineage):
        return _PREFETCH_SQL, (list(op.roots), list(op.scope), op.limit + 1), _stored_rows
    if isinstance(op, GetKeys):
        sql = f"SELECT {KEY_COLS} FROM pf_keys WHERE key = ANY(%s)"
        return sql, (list(op.keys),), states
    if isinstance(op, ListKeys):
        sql = f"SELECT {KEY_COLS} FROM pf_keys WHERE left(key, %s) = %s ORDER BY key"
        return sql, (len(op.prefix), op.prefix), states
    if isinstance(op, IdsWithPrefix):
        # Ids are lowercase hex, so [prefix, prefix || 'g') holds exactly those with it.
        sql = "SELECT id FROM pf_records WHERE id >= %s AND id < %s ORDER BY id LIMIT %s"
        return (
            sql,
            (op.prefix, op.prefix + "g", op.limit),
            lambda rows: [str(r[0]) for r in rows],
        )
    if isinstance(op, GetChanges):
        sql = f"SELECT {CHANGE_COLS} FROM pf_changes WHERE seq > %s ORDER BY seq LIMIT %s"
        return sql, (op.since, op.limit), _changes
    if isinstance(op, GetOwnerChanges):
        return owner_changes_sql("pf_changes", "%s"), (op.key, op.after_epoch), _changes
    if isinstance(op, QueryJournal):
        where, args = journal_filter(op.query, "%s", "pf_journal_labels")
        sql = f"SELECT {JOURNAL_COLS} FROM pf_journal {where} ORDER BY id DESC LIMIT %s"
        return sql, (*args, op.query.limit), lambda rows: [entry_from_row(r) for r in rows]
    raise TypeError(f"unknown read {type(op).__name__}")


# A record and the states of some keys in one statement (a snapshot by itself, one round trip
# with no pipeline to open): the record's columns, then the key's, on one row per key (the
# record's columns repeated; a record or keys not found leave their columns NULL).
RECORD_AND_KEYS = (
    "SELECT "
    + ", ".join(f"r.{c}" for c in RECORD_COLS.split(", "))
    + ", "
    + ", ".join(f"k.{c}" for c in KEY_COLS.split(", "))
    + " FROM (SELECT 1) AS one LEFT JOIN pf_records r ON r.id = %s"
    + " LEFT JOIN pf_keys k ON k.key = ANY(%s)"
)
_RECORD_WIDTH = len(RECORD_COLS.split(", "))


def record_and_key_rows(rows: list[Any]) -> list[Any]:
    n = _RECORD_WIDTH
    records = _stored_rows([rows[0][:n]]) if rows and rows[0][0] is not None else []
    states = _key_states([r[n:] for r in rows if r[n] is not None])
    return [records, states]
