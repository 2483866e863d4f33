"""Every error planfence raises, under one root. This tree is the store's; each higher layer
subclasses these and draws its own: the gate's in `planfence.plugins.gate`, Janus's in
`planfence.plugins.janus.errors`, the adapters' in `planfence.adapters`, the demos' in
`planfence.demos`.

PlanfenceError
├── MissingExtraError            an optional integration is not installed (has the pip hint)
├── ConfigError                  a bad store URL or setting
│   └── StoreNotFoundError       opened with create=False, and no store is there (file, schema)
└── StoreError                   anything the shared-memory store refuses or cannot do
    ├── InvalidKeyError          key or agent id does not match the allowed syntax
    ├── InvalidValueError        value is not JSON, or malformed record fields
    ├── ValueTooLargeError       value over the configured size limit
    ├── UnknownRecordError       a record id (or a parent / supersedes id) the store does not hold
    │   └── AmbiguousIdError     a short id that more than one stored record starts with
    ├── UnknownKeyError          a key with no owner
    ├── OwnershipError
    │   ├── NotOwnerError        only the key's owner may advance its head or transfer it
    │   ├── AlreadyOwnedError    a key's first owner can be assigned once
    │   └── EpochConflictError   a reassignment whose owner epoch is no longer the key's
    ├── HeadConflictError        compare-and-set lost: carries the current head
    ├── LeaseHeldError           a head advance on a leased key, by a writer that would not wait
    │   └── AdvancePendingError  a lease asked on a key whose owner is waiting to advance it
    ├── LeasesUnsupportedError   the backend cannot hold head leases
    ├── IntegrityError           a record read back does not hash to its id
    └── StoreUnavailableError    the backend cannot be reached
        └── StoreClosedError     the store was closed: every later use raises this, never reopens
"""

from __future__ import annotations


class PlanfenceError(Exception):
    """Root of every error planfence raises."""


class MissingExtraError(PlanfenceError, ImportError):
    """An optional integration was used without its extra installed."""

    def __init__(self, feature: str, extra: str) -> None:
        self.feature = feature
        self.extra = extra
        super().__init__(f"{feature} needs the '{extra}' extra: pip install 'planfence[{extra}]'")


class ConfigError(PlanfenceError, ValueError):
    """A store URL or setting that cannot be used (higher layers subclass it for theirs)."""


class StoreNotFoundError(ConfigError):
    """A store opened with `create=False` (or `?create=0`) that does not exist: a SQLite file
    that is missing, a PostgreSQL schema that is missing or holds no planfence tables.

    `path` names the store, `detail` (may be empty) what was found there, `check` what to check.
    """

    def __init__(self, path: str, *, detail: str = "", check: str = "the path") -> None:
        self.path = path
        self.detail = detail
        self.check = check
        found = f": {detail}" if detail else ""
        super().__init__(
            f"no store at {path}{found} (check {check}; to start a new store there, open it "
            "with create=True or add ?create=1 to the URL)"
        )


class StoreError(PlanfenceError):
    """The shared-memory store refused an operation or could not perform it."""


class InvalidKeyError(StoreError, ValueError):
    """A key or agent id that does not match the allowed syntax."""


class InvalidValueError(StoreError, ValueError):
    """A value that is not JSON, or record fields of the wrong shape."""


class ValueTooLargeError(StoreError, ValueError):
    """A value whose canonical JSON encoding exceeds the store's limit."""

    def __init__(self, key: str, size: int, limit: int) -> None:
        self.key = key
        self.size = size
        self.limit = limit
        super().__init__(f"value for {key!r} is {size} bytes, over the limit of {limit} bytes")


class UnknownRecordError(StoreError, KeyError):
    """One or more record ids the store does not hold."""

    def __init__(self, ids: list[str] | tuple[str, ...], what: str = "record") -> None:
        self.ids = tuple(ids)
        shown = ", ".join(self.ids[:3]) + (" ..." if len(self.ids) > 3 else "")
        super().__init__(f"unknown {what}: {shown}")

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class AmbiguousIdError(UnknownRecordError):
    """A short record id (a hex prefix) that more than one stored record starts with."""

    def __init__(self, prefix: str, candidates: list[str] | tuple[str, ...]) -> None:
        self.prefix = prefix
        self.candidates = tuple(candidates)
        StoreError.__init__(
            self,
            f"short id {prefix} is ambiguous: it starts "
            + ", ".join(self.candidates)
            + " (give more digits)",
        )


class UnknownKeyError(StoreError, KeyError):
    """A key that has no owner (and therefore no head)."""

    def __init__(self, key: str) -> None:
        self.key = key
        super().__init__(f"unknown key {key!r}: it has no owner")

    def __str__(self) -> str:
        return str(self.args[0])


class OwnershipError(StoreError):
    """An ownership rule was broken."""


class NotOwnerError(OwnershipError, PermissionError):
    """Only a key's owner may advance its head or transfer it."""

    def __init__(self, key: str, agent: str, owner: str) -> None:
        self.key = key
        self.agent = agent
        self.owner = owner
        super().__init__(f"{agent!r} is not the owner of {key!r} (owner: {owner!r})")


class AlreadyOwnedError(OwnershipError):
    """Assigning the first owner of a key that already has one."""

    def __init__(self, key: str, owner: str) -> None:
        self.key = key
        self.owner = owner
        super().__init__(f"{key!r} already has an owner ({owner!r}); transfer it instead")


class EpochConflictError(OwnershipError):
    """A reassignment that names the owner epoch it takes over from lost: the key's owner
    changed since (another reassignment or a transfer came first)."""

    def __init__(self, key: str, expected: int, current: int) -> None:
        self.key = key
        self.expected = expected
        self.current = current
        super().__init__(f"{key!r} is in owner epoch {current}, not {expected} as expected")


class HeadConflictError(StoreError):
    """Compare-and-set on a head lost: the head moved since the writer last saw it."""

    def __init__(self, key: str, expected: str | None, current: str | None) -> None:
        self.key = key
        self.expected = expected
        self.current = current
        super().__init__(
            f"head of {key!r} is {current or 'empty'}, not {expected or 'empty'} as expected"
        )


class LeaseHeldError(StoreError):
    """A head advance on a key someone holds a lease on, by a writer that asked not to wait.

    `wait_s` is how long the longest live lease on the key may still last (seconds).
    """

    def __init__(self, key: str, wait_s: float, holders: tuple[str, ...] = ()) -> None:
        self.key = key
        self.wait_s = max(0.0, wait_s)
        self.holders = holders
        who = f" by {', '.join(holders)}" if holders else ""
        super().__init__(
            f"{key!r} is leased{who} for up to {self.wait_s * 1000:.0f} ms more: "
            "its head cannot advance until the lease is released or expires"
        )


class AdvancePendingError(LeaseHeldError):
    """A lease asked on a key whose owner is already waiting to advance its head: the head is
    about to move, so no new lease is granted (the owner's wait stays bounded)."""

    def __init__(self, key: str, wait_s: float) -> None:
        StoreError.__init__(
            self,
            f"{key!r} is about to advance (its owner waits on the leases held now): "
            "no new lease is granted",
        )
        self.key = key
        self.wait_s = max(0.0, wait_s)
        self.holders = ()


class LeasesUnsupportedError(StoreError):
    """The store's backend does not implement head leases."""


class IntegrityError(StoreError):
    """A stored record that no longer hashes to its id (tampering or corruption)."""

    def __init__(self, record_id: str, detail: str = "content does not hash to its id") -> None:
        self.record_id = record_id
        super().__init__(f"record {record_id}: {detail}")


class StoreUnavailableError(StoreError, ConnectionError):
    """The store's backend cannot be reached."""


class StoreClosedError(StoreUnavailableError):
    """The store was closed by its user. A closed store stays closed: every later use raises
    this (a gate on it blocks as `store_unavailable`), on every backend, sync or async."""
