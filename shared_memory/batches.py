"""Write batches: what one atomic write stores, and `plan_batch`, the rules every backend applies.

Every rule about owners, heads and references is checked by `plan_batch`, pure logic that each
backend calls inside its own write transaction, so the rules are written once and hold
identically on every backend.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from copy import copy
from dataclasses import dataclass, field, replace

from .errors import (
    AlreadyOwnedError,
    EpochConflictError,
    HeadConflictError,
    IntegrityError,
    InvalidValueError,
    NotOwnerError,
    UnknownKeyError,
    UnknownRecordError,
)
from .journal import Entry, ToEntry, as_entry, bound_entry
from .leases import (
    DropLease,
    ExpectHead,
    LeaseOp,
    LeasePlan,
    LeaseRow,
    check_expectations,
    check_ttl,
    plan_leases,
)
from .model import FIRST_EPOCH, Change, KeyState
from .records import Record, StoreLimits, validate_agent, validate_key, validate_record_id
from .signing import HeadSigner, sign_head, sign_owner


@dataclass(frozen=True)
class AssignOwner:
    key: str
    owner: str
    by: str


@dataclass(frozen=True)
class TransferOwner:
    key: str
    new_owner: str
    by: str


@dataclass(frozen=True)
class ReassignOwner:
    """A fenced takeover: `by` (an assigner, not the owner) hands `key` to `new_owner`, in a new
    owner epoch; `from_epoch`, when given, is the epoch taken over (the write fails with
    `EpochConflictError` if the key's owner changed since). The key's leases end in the same
    write: they were taken in the old epoch."""

    key: str
    new_owner: str
    by: str
    from_epoch: int | None = None


@dataclass(frozen=True)
class AdvanceHead:
    key: str
    record_id: str
    expected: str | None
    by: str


Op = AssignOwner | TransferOwner | ReassignOwner | AdvanceHead


@dataclass(frozen=True, init=False)
class WriteBatch:
    """Everything one atomic write stores: new records, owner/head operations, journal entries,
    head leases taken or dropped, and the heads the write is conditional on (see `leases`).

    `entries` takes journal entries, or anything with a `to_entry()`, and holds each as the
    `Entry` it maps to. `signer` signs the head advances and owner changes made by its agent,
    with the sequence and epoch the write commits (the store's own signer when None; see
    `signing`). `held`: ids of leases the writer holds; they do not hold this batch's head
    advances back.
    """

    records: tuple[Record, ...]
    ops: tuple[Op, ...]
    entries: tuple[Entry, ...]
    leases: tuple[LeaseOp, ...]
    expect: tuple[ExpectHead, ...]
    signer: HeadSigner | None = field(compare=False, repr=False)
    held: tuple[str, ...]

    def __init__(
        self,
        records: Iterable[Record] = (),
        ops: Iterable[Op] = (),
        entries: Iterable[Entry | ToEntry] = (),
        leases: Iterable[LeaseOp] = (),
        expect: Iterable[ExpectHead] = (),
        signer: HeadSigner | None = None,
        held: Iterable[str] = (),
    ) -> None:
        # Frozen: fields are set as `dataclass` sets them, once.
        object.__setattr__(self, "records", tuple(records))
        object.__setattr__(self, "ops", tuple(ops))
        object.__setattr__(self, "entries", tuple(as_entry(e) for e in entries))
        object.__setattr__(self, "leases", tuple(leases))
        object.__setattr__(self, "expect", tuple(expect))
        object.__setattr__(self, "signer", signer)
        object.__setattr__(self, "held", tuple(held))

    def keys(self) -> list[str]:
        """Every key the batch touches: its ops', leases' and expected heads' keys."""
        return sorted(
            {op.key for op in self.ops}
            | {op.key for op in self.leases}
            | {e.key for e in self.expect}
        )

    @property
    def journal_only(self) -> bool:
        """Journal entries and nothing else (an audit record)."""
        return not (self.records or self.ops or self.leases or self.expect)

    def referenced_ids(self) -> set[str]:
        """Ids that must already exist (in the store or in this batch)."""
        refs: set[str] = set()
        for rec in self.records:
            refs.update(rec.parents)
            if rec.supersedes:
                refs.add(rec.supersedes)
        refs.update(op.record_id for op in self.ops if isinstance(op, AdvanceHead))
        return refs


@dataclass(frozen=True)
class WriteResult:
    """What a write did: the feed entries it appended (with seq) and its journal entry ids."""

    changes: list[Change] = field(default_factory=list)
    entry_ids: list[int] = field(default_factory=list)


def checked_batch(batch: WriteBatch, limits: StoreLimits) -> WriteBatch:
    """Re-derive every record of a hand-built batch, validate its ops and bound its entries,
    before any I/O.

    `Record` is a plain dataclass, so a caller can build one whose id does not match its content
    (or whose `value_json` is missing); storing it would plant a corrupt record.
    """
    records = []
    for rec in batch.records:
        fresh = Record.create(
            rec.key,
            rec.value,
            author=rec.author,
            parents=rec.parents,
            kind=rec.kind,
            supersedes=rec.supersedes,
            created_at=rec.created_at or None,
            limits=limits,
        )
        if fresh.id != rec.id or not rec.created_at:
            raise IntegrityError(
                rec.id, "fields do not hash to this id; build records with Record.create"
            )
        records.append(fresh)
    for op in batch.ops:
        validate_key(op.key, limits)
        validate_agent(op.by, limits)
        if isinstance(op, AssignOwner):
            validate_agent(op.owner, limits)
        elif isinstance(op, (TransferOwner, ReassignOwner)):
            validate_agent(op.new_owner, limits)
        else:
            validate_record_id(op.record_id)
            if op.expected is not None:
                validate_record_id(op.expected)
    for lop in batch.leases:
        validate_key(lop.key, limits)
        if not isinstance(lop, DropLease):
            validate_agent(lop.holder, limits)
            check_ttl(lop.ttl_ms)
        if not isinstance(lop.lease, str) or not 0 < len(lop.lease) <= 64:
            raise InvalidValueError(f"a lease id is 1 to 64 characters, not {lop.lease!r}")
    for e in batch.expect:
        validate_key(e.key, limits)
        if e.head is not None:
            validate_record_id(e.head)
    checked = copy(batch)  # every other field kept; the entries are `Entry`s already
    object.__setattr__(checked, "records", tuple(records))
    object.__setattr__(checked, "entries", tuple(bound_entry(e, limits) for e in batch.entries))
    return checked


@dataclass(frozen=True)
class PlannedWrite:
    """What a backend must write, computed by `plan_batch`."""

    new_states: dict[str, KeyState]
    created: set[str]
    changes: list[Change]
    leases: LeasePlan = field(default_factory=LeasePlan)


def plan_batch(
    batch: WriteBatch,
    states: Mapping[str, KeyState],
    existing_ids: set[str],
    record_keys: Mapping[str, str],
    at: str,
    *,
    lease_rows: Iterable[LeaseRow] = (),
    now: float = 0.0,
) -> PlannedWrite:
    """Check a batch against the current states of the keys it touches; pure.

    Args:
        states: current state of each touched key that has an owner.
        existing_ids: the referenced ids the store already holds.
        record_keys: key of every record an `AdvanceHead` points at (store or batch).
        lease_rows: the stored leases of the touched keys (backends that hold leases).
        now: the backend's clock in seconds, for lease expiry.

    A transfer starts a new owner epoch and drops the head's signature (it was the previous
    owner's); a head advance by the batch signer's agent is signed with its new sequence and
    the key's epoch; an assignment or transfer by the signer's agent gets its ownership claim
    signed (on the key and on the feed's owner change). A reassignment is a transfer signed by an
    assigner instead of the owner; it also ends every lease on the key.

    Raises:
        UnknownRecordError, UnknownKeyError, NotOwnerError, AlreadyOwnedError, HeadConflictError,
        LeaseHeldError, AdvancePendingError.
    """
    # The expected heads hold before anything of the batch applies.
    check_expectations(batch.expect, states)
    in_batch = {r.id for r in batch.records}
    missing = sorted(batch.referenced_ids() - in_batch - existing_ids)
    if missing:
        raise UnknownRecordError(missing, "parent or referenced record")
    cur: dict[str, KeyState] = dict(states)
    fenced: set[str] = set()  # reassigned keys: their leases end with the old epoch
    created: set[str] = set()
    changes: list[Change] = []
    for op in batch.ops:
        state = cur.get(op.key)
        if isinstance(op, AssignOwner):
            if state is not None:
                raise AlreadyOwnedError(op.key, state.owner)
            sig = _owner_signature(batch.signer, op.key, op.owner, FIRST_EPOCH, op.by)
            cur[op.key] = KeyState(op.key, op.owner, None, 0, FIRST_EPOCH, None, op.by, sig)
            created.add(op.key)
            changes.append(
                Change(0, op.key, "owner", None, None, op.owner, op.by, at, FIRST_EPOCH, sig)
            )
            continue
        if state is None:
            raise UnknownKeyError(op.key)
        if isinstance(op, ReassignOwner):
            if op.from_epoch is not None and op.from_epoch != state.epoch:
                raise EpochConflictError(op.key, op.from_epoch, state.epoch)
            epoch = state.epoch + 1
            sig = _owner_signature(batch.signer, op.key, op.new_owner, epoch, op.by)
            head, version = state.head, state.version
            cur[op.key] = KeyState(op.key, op.new_owner, head, version, epoch, None, op.by, sig)
            changes.append(
                Change(0, op.key, "owner", head, head, op.new_owner, op.by, at, epoch, sig)
            )
            fenced.add(op.key)
            continue
        if op.by != state.owner:
            raise NotOwnerError(op.key, op.by, state.owner)
        if isinstance(op, TransferOwner):
            epoch = state.epoch + 1
            sig = _owner_signature(batch.signer, op.key, op.new_owner, epoch, op.by)
            head, version = state.head, state.version
            cur[op.key] = KeyState(op.key, op.new_owner, head, version, epoch, None, op.by, sig)
            moved = (head, head, op.new_owner, op.by, at, epoch, sig)
            changes.append(Change(0, op.key, "owner", *moved))
        else:
            if op.expected != state.head:
                raise HeadConflictError(op.key, op.expected, state.head)
            if record_keys.get(op.record_id) != op.key:
                raise InvalidValueError(
                    f"record {op.record_id} is a version of "
                    f"{record_keys.get(op.record_id)!r}, not of {op.key!r}"
                )
            seq, epoch = state.version + 1, state.epoch
            sig = _signature(batch.signer, op, seq, epoch)
            cur[op.key] = replace(state, head=op.record_id, version=seq, head_sig=sig)
            moved = (op.record_id, state.head, state.owner, op.by, at, epoch, sig)
            changes.append(Change(0, op.key, "head", *moved))
    touched = {op.key for op in batch.ops}
    advancing = [op.key for op in batch.ops if isinstance(op, AdvanceHead)]
    rows = list(lease_rows)
    leases = plan_leases(
        batch.leases, advancing, cur, [r for r in rows if r.key not in fenced], now, batch.held
    )
    if fenced:
        ended = {(r.key, r.lease) for r in rows if r.key in fenced}
        leases = replace(leases, delete=sorted({*leases.delete, *ended}))
    return PlannedWrite({k: cur[k] for k in touched}, created, changes, leases)


def _signature(signer: HeadSigner | None, op: AdvanceHead, seq: int, epoch: int) -> str | None:
    if signer is None or signer.agent != op.by:
        return None
    return sign_head(signer, op.key, op.record_id, seq, epoch)


def _owner_signature(
    signer: HeadSigner | None, key: str, owner: str, epoch: int, by: str
) -> str | None:
    if signer is None or signer.agent != by:
        return None
    return sign_owner(signer, key, owner, epoch)
