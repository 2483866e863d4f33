"""Records: immutable, content-addressed versions of public keys.

A record id is the SHA-256 of a canonical JSON encoding of every other field, so a record cannot
change under its id and any record read back can be checked (`Record.verify`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from typing import Any, TypeAlias

from .errors import (
    ConfigError,
    IntegrityError,
    InvalidKeyError,
    InvalidValueError,
    ValueTooLargeError,
)

JSON: TypeAlias = Any
"""Any value that encodes as strict JSON (no NaN, string keys)."""

KIND_FACT = "fact"
KIND_PLAN = "plan"

# Always used with `fullmatch`: with `match`, a `$` anchor also matches before a final newline,
# so "order/7\n" would pass as a twin of "order/7".
_KEY_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-:@+=]*(/[A-Za-z0-9_][A-Za-z0-9_.\-:@+=]*)*")
_AGENT_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-:@]*")
_KIND_RE = re.compile(r"[a-z][a-z0-9_\-]*")
_ID_RE = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class StoreLimits:
    """Limits every backend enforces before anything is written."""

    max_value_bytes: int = 1 << 20
    max_key_length: int = 256
    max_agent_length: int = 128
    max_parents: int = 1024
    max_audit_field_bytes: int = 4096
    """Audit journal strings (subject, labels, detail strings) are cut at this many UTF-8
    bytes, with a `…[truncated N bytes]` marker."""
    max_audit_payload_bytes: int = 256 << 10
    """A journal entry's detail over this size keeps its smallest entries and names the others."""

    def __post_init__(self) -> None:
        for name in ("max_audit_field_bytes", "max_audit_payload_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"StoreLimits.{name} must be a positive integer, not {value!r}")


DEFAULT_LIMITS = StoreLimits()


def _check_keys(value: JSON) -> None:
    # json.dumps silently turns int/float/bool/None dict keys into strings, so {1: "a"} would be
    # stored as {"1": "a"} and read back different from what was written: refuse instead.
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for k, v in item.items():
                if not isinstance(k, str):
                    raise InvalidValueError(f"value is not JSON: object key {k!r} is not a string")
                stack.append(v)
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def canonical_json(value: JSON) -> str:
    """Encode `value` as canonical JSON (sorted keys, no spaces, no NaN); raise on non-JSON."""
    _check_keys(value)
    return canonical_json_of_str_keys(value)


def canonical_json_of_str_keys(value: JSON) -> str:
    """`canonical_json` for a caller that has already checked that every object key in `value`
    is a string (the one check the encoder cannot make itself)."""
    try:
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidValueError(f"value is not JSON: {exc}") from None
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: not storable, not hashable as UTF-8
            raise InvalidValueError("value is not JSON: a string holds a lone surrogate") from None
    return text


def _shown(value: object, limit: int = 80) -> str:
    """`repr` for an error message, cut short: a refused value may be megabytes long."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} characters)"


def validate_key(key: object, limits: StoreLimits = DEFAULT_LIMITS) -> str:
    if not isinstance(key, str) or not key:
        raise InvalidKeyError(f"key must be a non-empty string, got {_shown(key)}")
    if len(key) > limits.max_key_length:
        raise InvalidKeyError(f"key is {len(key)} characters, over {limits.max_key_length}")
    if not _KEY_RE.fullmatch(key):
        raise InvalidKeyError(
            f"invalid key {_shown(key)}: "
            "use segments of letters, digits and _.-:@+= separated by '/'"
        )
    return key


def valid_keys(keys: Iterable[object], limits: StoreLimits = DEFAULT_LIMITS) -> tuple[str, ...]:
    """The keys, each validated, sorted and without repeats; raises `InvalidKeyError`. A tuple
    of strings seen before costs a lookup: readers ask for the same few key sets again and
    again (a gate, on every check), and the answer depends on nothing else."""
    if type(keys) is tuple and all(type(k) is str for k in keys):
        return _valid_tuple(keys, limits)
    return _validated(keys, limits)


def _validated(keys: Iterable[object], limits: StoreLimits) -> tuple[str, ...]:
    return tuple(sorted({validate_key(k, limits) for k in keys}))


_valid_tuple = lru_cache(maxsize=1024)(_validated)


def validate_agent(agent: object, limits: StoreLimits = DEFAULT_LIMITS) -> str:
    if not isinstance(agent, str) or not agent:
        raise InvalidKeyError(f"agent id must be a non-empty string, got {_shown(agent)}")
    if len(agent) > limits.max_agent_length or not _AGENT_RE.fullmatch(agent):
        raise InvalidKeyError(
            f"invalid agent id {_shown(agent)}: letters, digits and _.-:@ only, "
            f"at most {limits.max_agent_length} characters"
        )
    return agent


def validate_record_id(record_id: object) -> str:
    if not isinstance(record_id, str) or not _ID_RE.fullmatch(record_id):
        raise InvalidValueError(f"malformed record id {_shown(record_id)}: expected 64 hex digits")
    return record_id


def is_record_id(value: object) -> bool:
    return isinstance(value, str) and _ID_RE.fullmatch(value) is not None


def utc_now() -> str:
    # isoformat is C all the way (strftime handles %f in Python): same text, a tenth the time.
    return _utc_text(datetime.now(timezone.utc))


def utc_at(seconds: float) -> str:
    """`utc_now`'s text for an earlier instant (`time.time()` seconds)."""
    return _utc_text(datetime.fromtimestamp(seconds, timezone.utc))


def _utc_text(moment: datetime) -> str:
    return moment.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def _hash_fields(
    key: str,
    value_json: str,
    parents: tuple[str, ...],
    author: str,
    kind: str,
    supersedes: str | None,
    created_at: str,
) -> str:
    # The value enters as its canonical text so the digest never depends on dict order.
    body = canonical_json(
        {
            "author": author,
            "created_at": created_at,
            "key": key,
            "kind": kind,
            "parents": list(parents),
            "supersedes": supersedes,
            "value": value_json,
            "v": 1,
        }
    )
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Record:
    """One immutable version of a key. Build new ones with `Record.create`."""

    id: str
    key: str
    value: JSON
    parents: tuple[str, ...]
    author: str
    kind: str = KIND_FACT
    supersedes: str | None = None
    created_at: str = ""
    value_json: str = field(default="", repr=False, compare=False)

    @classmethod
    def create(
        cls,
        key: str,
        value: JSON,
        *,
        author: str,
        parents: Iterable[str] = (),
        kind: str = KIND_FACT,
        supersedes: str | None = None,
        created_at: str | None = None,
        limits: StoreLimits = DEFAULT_LIMITS,
    ) -> Record:
        """Validate the fields and compute the content id.

        Raises:
            InvalidKeyError, InvalidValueError, ValueTooLargeError: the fields break a rule.
        """
        validate_key(key, limits)
        validate_agent(author, limits)
        if not isinstance(kind, str) or not _KIND_RE.fullmatch(kind):
            raise InvalidValueError(f"invalid record kind {_shown(kind)}")
        if isinstance(parents, str):
            raise InvalidValueError("parents must be a list of record ids, not a string")
        parent_ids = tuple(sorted({validate_record_id(p) for p in parents}))
        if len(parent_ids) > limits.max_parents:
            raise InvalidValueError(f"{len(parent_ids)} parents, over {limits.max_parents}")
        if supersedes is not None:
            validate_record_id(supersedes)
        value_json = canonical_json(value)
        size = len(value_json.encode("utf-8"))
        if size > limits.max_value_bytes:
            raise ValueTooLargeError(key, size, limits.max_value_bytes)
        stamp = created_at or utc_now()
        rid = _hash_fields(key, value_json, parent_ids, author, kind, supersedes, stamp)
        return cls(
            id=rid,
            key=key,
            value=json.loads(value_json),
            parents=parent_ids,
            author=author,
            kind=kind,
            supersedes=supersedes,
            created_at=stamp,
            value_json=value_json,
        )

    @classmethod
    def from_stored(
        cls,
        *,
        id: str,
        key: str,
        value_json: str,
        parents: Iterable[str],
        author: str,
        kind: str,
        supersedes: str | None,
        created_at: str,
    ) -> Record:
        """Rebuild a record read from a backend and check that it hashes to its id."""
        parent_ids = tuple(parents)
        try:
            value = json.loads(value_json)
        except (TypeError, ValueError):
            raise IntegrityError(id, "stored value is not JSON") from None
        expected = _hash_fields(key, value_json, parent_ids, author, kind, supersedes, created_at)
        if expected != id:
            raise IntegrityError(id)
        return cls(id, key, value, parent_ids, author, kind, supersedes, created_at, value_json)

    def verify(self) -> None:
        """Raise `IntegrityError` unless the fields hash to `id`."""
        expected = _hash_fields(
            self.key,
            canonical_json(self.value),
            self.parents,
            self.author,
            self.kind,
            self.supersedes,
            self.created_at,
        )
        if expected != self.id:
            raise IntegrityError(self.id)

    def to_dict(self) -> dict[str, JSON]:
        return {
            "id": self.id,
            "key": self.key,
            "value": self.value,
            "parents": list(self.parents),
            "author": self.author,
            "kind": self.kind,
            "supersedes": self.supersedes,
            "created_at": self.created_at,
        }

    @classmethod
    def from_dict(cls, data: dict[str, JSON]) -> Record:
        """Rebuild a record received over a wire, checking its id."""
        try:
            return cls.from_stored(
                id=data["id"],
                key=data["key"],
                value_json=canonical_json(data["value"]),
                parents=tuple(data["parents"]),
                author=data["author"],
                kind=data["kind"],
                supersedes=data.get("supersedes"),
                created_at=data["created_at"],
            )
        except (KeyError, TypeError) as exc:
            raise InvalidValueError(f"malformed record: {exc}") from None


StoredFields = tuple[str, str, str, tuple[str, ...], str, str, "str | None", str]
"""(id, key, value_json, parents, author, kind, supersedes, created_at) as a backend stores them."""


class VerifiedRecords:
    """A bounded cache of records already checked against their id.

    Records are immutable, so a row read again with exactly the same stored fields is the same
    record and need not be re-hashed; a row that differs in any field is verified from scratch,
    so tampering is still caught. Cached records are shared: treat `Record.value` as read-only.
    """

    def __init__(self, capacity: int = 100_000, max_bytes: int = 32 << 20) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes
        self.bytes = 0
        self._entries: OrderedDict[str, tuple[tuple[object, ...], Record]] = OrderedDict()

    def load(
        self,
        record_id: str,
        key: str,
        value_json: str,
        parents: tuple[str, ...],
        author: str,
        kind: str,
        supersedes: str | None,
        created_at: str,
    ) -> Record:
        fields = (key, value_json, parents, author, kind, supersedes, created_at)
        hit = self._entries.get(record_id)
        if hit is not None and hit[0] == fields:
            self._entries.move_to_end(record_id)
            return hit[1]
        record = Record.from_stored(
            id=record_id,
            key=key,
            value_json=value_json,
            parents=parents,
            author=author,
            kind=kind,
            supersedes=supersedes,
            created_at=created_at,
        )
        if hit is not None:
            self.bytes -= len(hit[1].value_json)
        self._entries[record_id] = (fields, record)
        self._entries.move_to_end(record_id)
        self.bytes += len(value_json)
        while self._entries and (len(self._entries) > self.capacity or self.bytes > self.max_bytes):
            _, (_, old) = self._entries.popitem(last=False)
            self.bytes -= len(old.value_json)
        return record
