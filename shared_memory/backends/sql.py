"""What the two SQL backends share: column lists, row mappings and the journal's WHERE clause."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..errors import StoreUnavailableError
from ..journal import Entry, JournalQuery, detail_json
from ..model import Change, KeyState
from ..records import Record, canonical_json_of_str_keys

RECORD_COLS = "id, key, value, parents, author, kind, supersedes, created_at"
"""Record columns in the order of `StoredFields` (value holds the canonical `value_json`)."""
JOURNAL_COLS = "id, at, kind, subject, labels, detail"
KEY_COLS = "key, owner, head, version, epoch, head_sig, owner_from, owner_sig"
"""Key columns in the order of `KeyState`."""
CHANGE_COLS = "seq, key, kind, head, previous, owner, by, at, epoch, sig"
"""Change-feed columns in the order of `Change`."""


def newer_schema(store: str, found: int, known: int) -> StoreUnavailableError:
    """The refusal of a store whose schema a newer planfence wrote: this one would misread it."""
    return StoreUnavailableError(
        f"{store} has schema version {found}, newer than this planfence's {known}: "
        "upgrade planfence to open it"
    )


def owner_changes_sql(table: str, mark: str) -> str:
    """A key's owner changes above an epoch, in seq order (served by the feed's (key, seq)
    index); arguments: key, epoch."""
    return (
        f"SELECT {CHANGE_COLS} FROM {table} WHERE key = {mark} AND kind = 'owner' "
        f"AND epoch > {mark} ORDER BY seq"
    )


def upsert_key_sql(table: str, mark: str) -> str:
    """Write a key's whole state (`key_row`); `mark` is the driver's placeholder."""
    return (
        f"INSERT INTO {table} ({KEY_COLS}) VALUES ({','.join([mark] * 8)}) "
        "ON CONFLICT (key) DO UPDATE SET owner=excluded.owner, head=excluded.head, "
        "version=excluded.version, epoch=excluded.epoch, head_sig=excluded.head_sig, "
        "owner_from=excluded.owner_from, owner_sig=excluded.owner_sig"
    )


def insert_change_sql(table: str, mark: str) -> str:
    """Append one feed entry (`change_row`); `mark` is the driver's placeholder."""
    return (
        f"INSERT INTO {table} (key, kind, head, previous, owner, by, at, epoch, sig) "
        f"VALUES ({','.join([mark] * 9)})"
    )


TAMPERABLE = {
    "key": "key",
    "value_json": "value",
    "parents": "parents",
    "author": "author",
    "kind": "kind",
    "supersedes": "supersedes",
    "created_at": "created_at",
}
"""Stored record fields a test may corrupt (`_tamper_record`), and their columns."""


def record_row(rec: Record, parents: Any) -> tuple[Any, ...]:
    return (
        rec.id,
        rec.key,
        rec.value_json,
        parents,
        rec.author,
        rec.kind,
        rec.supersedes,
        rec.created_at,
    )


def key_row(state: KeyState) -> tuple[Any, ...]:
    return (
        state.key,
        state.owner,
        state.head,
        state.version,
        state.epoch,
        state.head_sig,
        state.owner_from,
        state.owner_sig,
    )


def change_row(ch: Change) -> tuple[Any, ...]:
    return (ch.key, ch.kind, ch.head, ch.previous, ch.owner, ch.by, ch.at, ch.epoch, ch.sig)


def entry_row(entry: Entry, at: str) -> tuple[str, str, str | None, str, str]:
    """(at, kind, subject, labels, detail) for an INSERT into the journal."""
    return (
        entry.at or at,
        entry.kind,
        entry.subject,
        canonical_json_of_str_keys(dict(entry.labels)),  # `Entry` holds str -> str labels
        detail_json(entry),
    )


def label_rows(entry_id: int, entry: Entry) -> list[tuple[int, str, str]]:
    return [(entry_id, name, value) for name, value in entry.labels.items()]


def entry_from_row(row: Sequence[Any]) -> Entry:
    id_, at, kind, subject, labels, detail = row
    return Entry(
        kind=kind,
        subject=subject,
        labels=json.loads(labels),
        detail=json.loads(detail),
        at=at,
        id=int(id_),
    )


def journal_filter(query: JournalQuery, mark: str, labels_table: str) -> tuple[str, list[Any]]:
    """WHERE clause for `query` (`mark` is the driver's placeholder); labels are matched through
    the indexed label table, one subquery per label name."""
    clauses: list[str] = []
    args: list[Any] = []
    for column, value in (("kind", query.kind), ("subject", query.subject)):
        if value is not None:
            clauses.append(f"{column} = {mark}")
            args.append(value)
    if query.before_id is not None:
        clauses.append(f"id < {mark}")
        args.append(query.before_id)
    for name, values in query.labels:
        marks = ", ".join([mark] * len(values))
        clauses.append(
            f"id IN (SELECT entry FROM {labels_table} WHERE name = {mark} AND value IN ({marks}))"
        )
        args.extend([name, *values])
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", args
