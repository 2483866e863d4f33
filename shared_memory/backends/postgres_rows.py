"""PostgreSQL rows to store types, and a journal entry to the append statement's arguments."""

from __future__ import annotations

from typing import Any

from ..journal import Entry
from ..model import Change, KeyState
from ..records import StoredFields
from .sql import entry_row


def _stored_rows(rows: list[Any]) -> list[StoredFields]:
    return [(r[0], r[1], r[2], tuple(r[3]), r[4], r[5], r[6], r[7]) for r in rows]


def _key_states(rows: list[Any]) -> list[KeyState]:
    return [KeyState(r[0], r[1], r[2], int(r[3]), int(r[4]), r[5], r[6], r[7]) for r in rows]


def _changes(rows: list[Any]) -> list[Change]:
    return [
        Change(int(r[0]), r[1], r[2], r[3], r[4], r[5], r[6], r[7], int(r[8]), r[9]) for r in rows
    ]


def _append_args(entry: Entry, at: str) -> tuple[Any, ...]:
    names = list(entry.labels)
    return (*entry_row(entry, at), names, [entry.labels[n] for n in names])
