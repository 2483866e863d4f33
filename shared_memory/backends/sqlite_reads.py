"""The SQLite store's reads: the statement answering each read op, and its rows as store types."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from ..errors import IntegrityError
from ..model import Change, KeyState
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
from ..records import StoredFields
from .sql import (
    CHANGE_COLS,
    JOURNAL_COLS,
    KEY_COLS,
    RECORD_COLS,
    entry_from_row,
    journal_filter,
    owner_changes_sql,
)
from .sqlite_schema import _PREFETCH_SQL

FEW_KEYS = 16
_KEYS_IN = [f"SELECT {KEY_COLS} FROM keys WHERE key IN ({','.join('?' * n)})" for n in range(17)]
# A record and the states of a few keys in one statement (a snapshot by itself): what a gate's
# check reads first, its plan and the heads of D(a). The first column tells the rows apart.
_RECORD_AND_KEYS = [
    f"SELECT 1, {RECORD_COLS} FROM records WHERE id = ? "
    f"UNION ALL SELECT 0, {KEY_COLS} FROM keys WHERE key IN ({','.join('?' * n)})"
    for n in range(FEW_KEYS + 1)
]


def answer_one(conn: sqlite3.Connection, op: ReadOp) -> Any:
    """The raw answer to one read op (see `planfence.shared_memory.reads`)."""
    if isinstance(op, GetRecords):
        if len(op.ids) == 1:  # a plan, read on every check: the plain index lookup is cheaper
            rows = conn.execute(f"SELECT {RECORD_COLS} FROM records WHERE id = ?", op.ids)
            return [_stored(r) for r in rows]
        rows = conn.execute(
            f"SELECT {RECORD_COLS} FROM records WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(op.ids)),),
        )
        return [_stored(r) for r in rows]
    if isinstance(op, Lineage):
        walk = (json.dumps(list(op.roots)), json.dumps(list(op.scope)), op.limit + 1)
        return [_stored(r) for r in conn.execute(_PREFETCH_SQL, walk)]
    if isinstance(op, GetKeys):
        if 0 < len(op.keys) <= FEW_KEYS:  # a tool's D(a): one prepared statement per size
            rows = conn.execute(_KEYS_IN[len(op.keys)], tuple(op.keys))
        else:
            rows = conn.execute(
                f"SELECT {KEY_COLS} FROM keys WHERE key IN (SELECT value FROM json_each(?))",
                (json.dumps(list(op.keys)),),
            )
        return [KeyState(*r) for r in rows]
    if isinstance(op, ListKeys):
        rows = conn.execute(
            f"SELECT {KEY_COLS} FROM keys WHERE substr(key, 1, ?) = ? ORDER BY key",
            (len(op.prefix), op.prefix),
        )
        return [KeyState(*r) for r in rows]
    if isinstance(op, IdsWithPrefix):
        # Ids are lowercase hex, so [prefix, prefix + "g") holds exactly those starting with it.
        rows = conn.execute(
            "SELECT id FROM records WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
            (op.prefix, op.prefix + "g", op.limit),
        )
        return [str(r[0]) for r in rows]
    if isinstance(op, GetChanges):
        rows = conn.execute(
            f"SELECT {CHANGE_COLS} FROM changes WHERE seq > ? ORDER BY seq LIMIT ?",
            (op.since, op.limit),
        )
        return [Change(*r) for r in rows]
    if isinstance(op, GetOwnerChanges):
        rows = conn.execute(owner_changes_sql("changes", "?"), (op.key, op.after_epoch))
        return [Change(*r) for r in rows]
    if isinstance(op, QueryJournal):
        where, args = journal_filter(op.query, "?", "journal_labels")
        rows = conn.execute(
            f"SELECT {JOURNAL_COLS} FROM journal {where} ORDER BY id DESC LIMIT ?",
            (*args, op.query.limit),
        )
        return [entry_from_row(r) for r in rows]
    raise TypeError(f"unknown read {type(op).__name__}")


def read_record_and_keys(
    conn: sqlite3.Connection, record_id: str, keys: tuple[str, ...]
) -> list[Any]:
    """The answers to `GetRecords((record_id,))` and `GetKeys(keys)`, from one statement."""
    rows = conn.execute(_RECORD_AND_KEYS[len(keys)], (record_id, *keys))
    records: list[StoredFields] = []
    states: list[KeyState] = []
    for is_record, *row in rows:
        if is_record:
            records.append(_stored(row))
        else:
            states.append(KeyState(*row))
    return [records, states]


def _stored(row: Sequence[Any]) -> StoredFields:
    try:
        parents = tuple(json.loads(row[3]))
    except (TypeError, ValueError):
        raise IntegrityError(row[0], "stored parents are not a list") from None
    return (row[0], row[1], row[2], parents, row[4], row[5], row[6], row[7])
