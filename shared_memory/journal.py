"""The audit journal: an append-only log of entries about subjects, for any caller.

An entry is something of `kind` about `subject` (a record id, a key, any name the caller uses),
with free-form `detail`. `labels` are short named strings an entry can be found by; every backend
indexes them, and a query names the labels (and the values of each) it wants. The store knows no
caller's vocabulary: callers map their own records to entries and choose their own labels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from .audit import bound_detail, truncate_text
from .errors import InvalidValueError
from .model import plain
from .records import JSON, StoreLimits, canonical_json


@dataclass(frozen=True)
class Entry:
    """One journal entry; `id` and `at` are set by the store when it is appended. Everything but
    `kind` is given by name."""

    kind: str
    _: KW_ONLY
    subject: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    detail: Mapping[str, JSON] = field(default_factory=dict)
    at: str = ""
    id: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", plain(self.kind))
        labels = {str(plain(k)): plain(v) for k, v in self.labels.items() if v is not None}
        for name, value in labels.items():
            if not isinstance(value, str):
                raise InvalidValueError(f"journal label {name!r} must be a string, not {value!r}")
        object.__setattr__(self, "labels", dict(sorted(labels.items())))

    def to_dict(self) -> dict[str, JSON]:
        return {
            "id": self.id,
            "at": self.at,
            "kind": self.kind,
            "subject": self.subject,
            "labels": dict(self.labels),
            "detail": dict(self.detail),
        }


@runtime_checkable
class ToEntry(Protocol):
    """A caller's own record that maps to a journal entry (a higher layer's audit record, say)."""

    def to_entry(self) -> Entry: ...


def as_entry(item: Entry | ToEntry) -> Entry:
    if isinstance(item, Entry):
        return item
    if callable(getattr(item, "to_entry", None)):  # what isinstance(ToEntry) checks, faster
        return item.to_entry()
    raise InvalidValueError(f"not a journal entry: {type(item).__name__}")


def bound_entry(entry: Entry, limits: StoreLimits) -> Entry:
    """A copy of `entry` whose strings and detail fit the audit bounds of `limits` (see `audit`):
    callers choose subjects and labels, and a refusal must be recorded at a bounded size."""
    n = limits.max_audit_field_bytes

    def cut(text: Any) -> Any:
        return truncate_text(text, n) if isinstance(text, str) else text

    detail, text = bound_detail(dict(entry.detail), limits)
    if text is not None and _all_short(entry, n // 4):  # no character takes more than 4 bytes
        # Nothing to cut (the common case): a copy without re-validation, with its own dicts
        # (the caller's may change).
        bounded = object.__new__(Entry)
        bounded.__dict__.update(entry.__dict__, labels=dict(entry.labels), detail=detail)
    else:
        bounded = replace(
            entry,
            kind=cut(entry.kind),
            subject=cut(entry.subject),
            labels={cut(k): cut(v) for k, v in entry.labels.items()},
            detail=detail,
        )
    if text is not None:
        object.__setattr__(bounded, _DETAIL_JSON, text)  # frozen, but this is a cache
    return bounded


def _all_short(entry: Entry, max_chars: int) -> bool:
    """The entry's kind, subject and labels are strings of at most `max_chars` characters."""
    strings = [entry.kind, entry.subject or "", *entry.labels, *entry.labels.values()]
    return all(type(s) is str for s in strings) and max(map(len, strings)) <= max_chars


_DETAIL_JSON = "_detail_json"


def detail_json(entry: Entry) -> str:
    """The canonical JSON of `entry.detail` (computed once, when `bound_entry` already did)."""
    text = entry.__dict__.get(_DETAIL_JSON)
    return text if isinstance(text, str) else canonical_json(dict(entry.detail))


@dataclass(frozen=True)
class JournalQuery:
    """Entries matching every given field, newest first. `labels` maps a label name to the
    values accepted for it (any one of them)."""

    kind: str | None = None
    subject: str | None = None
    labels: tuple[tuple[str, tuple[str, ...]], ...] = ()
    limit: int = 100
    before_id: int | None = None

    @classmethod
    def where(
        cls,
        *,
        kind: str | None = None,
        subject: str | None = None,
        labels: Mapping[str, str | Iterable[str] | None] | None = None,
        limit: int = 100,
        before_id: int | None = None,
    ) -> JournalQuery:
        wanted: list[tuple[str, tuple[str, ...]]] = []
        for name, value in sorted((labels or {}).items()):
            if value is None:
                continue
            values = (value,) if isinstance(value, str) else tuple(value)
            if not values:  # no values given: no filter on that label
                continue
            wanted.append((name, tuple(plain(v) for v in values)))
        return cls(plain(kind), subject, tuple(wanted), limit, before_id)

    def matches(self, entry: Entry) -> bool:
        """The query as a predicate; backends without an index may filter with it."""
        if self.before_id is not None and entry.id is not None and entry.id >= self.before_id:
            return False
        for want, have in ((self.kind, entry.kind), (self.subject, entry.subject)):
            if want is not None and want != have:
                return False
        return all(entry.labels.get(name) in values for name, values in self.labels)
