"""The abstract store: a tiny core each backend implements, and the public API derived from it.

Backends implement five primitives (`_apply`, `_get_records`, `_get_keys`, `_list_keys`,
`_changes`, plus `_decisions` for the log). Every rule about owners, heads and references is
checked by `plan_batch`, pure logic that each backend calls inside its own transaction, so the
rules are written once and hold identically on every backend.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from .audit import bound_payload, truncate_text
from .errors import (
    AlreadyOwnedError,
    AmbiguousIdError,
    HeadConflictError,
    IntegrityError,
    InvalidValueError,
    NotOwnerError,
    UnknownKeyError,
    UnknownRecordError,
)
from .lineage import DEFAULT_MAX_RECORDS, Frontier, frontier_async
from .records import (
    DEFAULT_LIMITS,
    JSON,
    KIND_FACT,
    Record,
    StoreLimits,
    canonical_json,
    utc_now,
    validate_agent,
    validate_key,
    validate_record_id,
)
from .urls import redact_url

MIN_SHORT_ID: Final = 8
"""Shortest record-id prefix accepted as input (ids are printed as their first 12 digits)."""
SHORT_ID_RE: Final = re.compile(rf"[0-9a-f]{{{MIN_SHORT_ID},63}}")
AMBIGUOUS_SHOWN: Final = 10


class _Current:
    def __repr__(self) -> str:
        return "CURRENT"


CURRENT: Final = _Current()
"""`expected_head=CURRENT`: compare-and-set against the head read just before the write."""


@dataclass(frozen=True)
class KeyState:
    key: str
    owner: str
    head: str | None
    version: int = 0


@dataclass(frozen=True)
class Change:
    """One entry of the change feed: a head moved or an owner changed."""

    seq: int
    key: str
    kind: Literal["head", "owner"]
    head: str | None
    previous: str | None
    owner: str
    by: str
    at: str

    def to_dict(self) -> dict[str, JSON]:
        return {
            "seq": self.seq,
            "key": self.key,
            "kind": self.kind,
            "head": self.head,
            "previous": self.previous,
            "owner": self.owner,
            "by": self.by,
            "at": self.at,
        }


def plain(text: Any) -> Any:
    """A string subclass (an enum of codes) as a plain `str`, so every driver stores its value."""
    return str.__str__(text) if isinstance(text, str) and type(text) is not str else text


@dataclass(frozen=True)
class Decision:
    """One entry of the decision log (gate verdicts, Janus deploy/keep decisions)."""

    source: str
    verdict: str
    reason: str = ""
    agent: str | None = None
    tool: str | None = None
    plan: str | None = None
    payload: Mapping[str, JSON] = field(default_factory=dict)
    at: str = ""
    id: int | None = None

    def __post_init__(self) -> None:
        for name in ("source", "verdict", "reason"):
            object.__setattr__(self, name, plain(getattr(self, name)))

    def to_dict(self) -> dict[str, JSON]:
        return {
            "id": self.id,
            "at": self.at,
            "source": self.source,
            "agent": self.agent,
            "tool": self.tool,
            "plan": self.plan,
            "verdict": self.verdict,
            "reason": self.reason,
            "payload": dict(self.payload),
        }


def bound_decision(decision: Decision, limits: StoreLimits) -> Decision:
    """A copy of `decision` whose strings and payload fit the audit bounds of `limits` (see
    `planfence.shared_memory.audit`): callers choose plan references, tool names and agent ids,
    and a refused call must be recorded without storing whatever size they sent."""
    n = limits.max_audit_field_bytes

    def cut(text: Any) -> Any:
        return truncate_text(text, n) if isinstance(text, str) else text

    return replace(
        decision,
        source=cut(decision.source),
        verdict=cut(decision.verdict),
        reason=cut(decision.reason),
        agent=cut(decision.agent),
        tool=cut(decision.tool),
        plan=cut(decision.plan),
        payload=bound_payload(dict(decision.payload), limits),
    )


# --- write batches ----------------------------------------------------------------------------


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
class AdvanceHead:
    key: str
    record_id: str
    expected: str | None
    by: str


Op = AssignOwner | TransferOwner | AdvanceHead


@dataclass(frozen=True)
class WriteBatch:
    """Everything one atomic write stores: new records, owner/head operations, log entries."""

    records: tuple[Record, ...] = ()
    ops: tuple[Op, ...] = ()
    decisions: tuple[Decision, ...] = ()

    def keys(self) -> list[str]:
        return sorted({op.key for op in self.ops})

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
class PlannedWrite:
    """What a backend must write, computed by `plan_batch`."""

    new_states: dict[str, KeyState]
    created: set[str]
    changes: list[Change]


def plan_batch(
    batch: WriteBatch,
    states: Mapping[str, KeyState],
    existing_ids: set[str],
    record_keys: Mapping[str, str],
    at: str,
) -> PlannedWrite:
    """Check a batch against the current states of the keys it touches; pure.

    Args:
        states: current state of each touched key that has an owner.
        existing_ids: the referenced ids the store already holds.
        record_keys: key of every record an `AdvanceHead` points at (store or batch).

    Raises:
        UnknownRecordError, UnknownKeyError, NotOwnerError, AlreadyOwnedError, HeadConflictError.
    """
    in_batch = {r.id for r in batch.records}
    missing = sorted(batch.referenced_ids() - in_batch - existing_ids)
    if missing:
        raise UnknownRecordError(missing, "parent or referenced record")
    cur: dict[str, KeyState] = dict(states)
    created: set[str] = set()
    changes: list[Change] = []
    for op in batch.ops:
        state = cur.get(op.key)
        if isinstance(op, AssignOwner):
            if state is not None:
                raise AlreadyOwnedError(op.key, state.owner)
            cur[op.key] = KeyState(op.key, op.owner, None, 0)
            created.add(op.key)
            changes.append(Change(0, op.key, "owner", None, None, op.owner, op.by, at))
            continue
        if state is None:
            raise UnknownKeyError(op.key)
        if op.by != state.owner:
            raise NotOwnerError(op.key, op.by, state.owner)
        if isinstance(op, TransferOwner):
            cur[op.key] = KeyState(op.key, op.new_owner, state.head, state.version)
            changes.append(
                Change(0, op.key, "owner", state.head, state.head, op.new_owner, op.by, at)
            )
        else:
            if op.expected != state.head:
                raise HeadConflictError(op.key, op.expected, state.head)
            if record_keys.get(op.record_id) != op.key:
                raise InvalidValueError(
                    f"record {op.record_id} is a version of "
                    f"{record_keys.get(op.record_id)!r}, not of {op.key!r}"
                )
            cur[op.key] = KeyState(op.key, state.owner, op.record_id, state.version + 1)
            changes.append(
                Change(0, op.key, "head", op.record_id, state.head, state.owner, op.by, at)
            )
    touched = {op.key for op in batch.ops}
    return PlannedWrite({k: cur[k] for k in touched}, created, changes)


def decision_row(
    d: Decision, at: str
) -> tuple[str, str, str | None, str | None, str | None, str, str, str]:
    return (
        d.at or at,
        d.source,
        d.agent,
        d.tool,
        d.plan,
        d.verdict,
        d.reason,
        canonical_json(dict(d.payload)),
    )


def decision_from_row(row: Sequence[Any]) -> Decision:
    id_, at, source, agent, tool, plan, verdict, reason, payload = row
    return Decision(
        id=int(id_),
        at=at,
        source=source,
        agent=agent,
        tool=tool,
        plan=plan,
        verdict=verdict,
        reason=reason,
        payload=json.loads(payload),
    )


def decision_filter(query: DecisionQuery, mark: str) -> tuple[str, list[Any]]:
    """WHERE clause shared by the SQL backends (`mark` is the driver's placeholder)."""
    clauses: list[str] = []
    args: list[Any] = []
    for column, value in (
        ("source", query.source),
        ("tool", query.tool),
        ("verdict", query.verdict),
        ("agent", query.agent),
        ("plan", query.plan),
    ):
        if value is not None:
            clauses.append(f"{column} = {mark}")
            args.append(value)
    if query.before_id is not None:
        clauses.append(f"id < {mark}")
        args.append(query.before_id)
    if query.reasons:
        clauses.append(f"reason IN ({', '.join([mark] * len(query.reasons))})")
        args.extend(query.reasons)
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", args


@dataclass(frozen=True)
class DecisionQuery:
    source: str | None = None
    tool: str | None = None
    verdict: str | None = None
    agent: str | None = None
    plan: str | None = None
    limit: int = 100
    before_id: int | None = None
    reasons: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "reasons", tuple(plain(r) for r in self.reasons))
        object.__setattr__(self, "verdict", plain(self.verdict))


@dataclass(frozen=True)
class Flag:
    """A question a snapshot answers about the plan its root supersedes: does the log hold a
    decision from `source` with one of `reasons` about it?"""

    source: str
    reasons: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "reasons", tuple(plain(r) for r in self.reasons))

    def query(self, plan: str) -> DecisionQuery:
        return DecisionQuery(source=self.source, plan=plan, reasons=self.reasons, limit=1)


@dataclass(frozen=True)
class PlanSnapshot:
    """A root record, its frontier over a scope, and the owners/heads of that scope."""

    root: Record | None
    frontier: Frontier | None = None
    states: Mapping[str, KeyState] = field(default_factory=dict)
    superseded_flagged: bool = False
    """The plan the root supersedes has a logged decision matching the snapshot's `flag`."""


# --- the abstract store -----------------------------------------------------------------------


class AsyncStore:
    """Versioned public records with owner-controlled heads. Async API; see `Store` for sync."""

    url: str = ""
    poll_interval: float = 0.05

    def __init__(self, *, limits: StoreLimits = DEFAULT_LIMITS) -> None:
        self.limits = limits

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {redact_url(self.url)}>"

    # ---- primitives each backend implements

    async def _apply(self, batch: WriteBatch) -> list[Change]:
        """Atomically check (with `plan_batch`) and write `batch`; return the changes with seq."""
        raise NotImplementedError

    async def _get_records(self, ids: Sequence[str]) -> dict[str, Record]:
        raise NotImplementedError

    async def _get_keys(self, keys: Sequence[str]) -> dict[str, KeyState]:
        raise NotImplementedError

    async def _list_keys(self, prefix: str) -> list[KeyState]:
        raise NotImplementedError

    async def _changes(self, since: int, limit: int) -> list[Change]:
        raise NotImplementedError

    async def _ids_with_prefix(self, prefix: str, limit: int) -> list[str]:
        """Up to `limit` stored record ids starting with the lowercase hex `prefix`, sorted."""
        raise NotImplementedError

    async def _decisions(self, query: DecisionQuery) -> list[Decision]:
        raise NotImplementedError

    async def _prefetch_lineage(
        self, roots: Sequence[str], scope: Sequence[str], limit: int
    ) -> dict[str, Record] | None:
        """Optionally fetch a plan's ancestry in one query; None means walk level by level."""
        return None

    async def _snapshot(
        self, root_id: str, scope: list[str], max_records: int, flag: Flag | None = None
    ) -> PlanSnapshot:
        """Backends may override to read everything in one round trip."""
        root = (await self._get_records([root_id])).get(root_id)
        if root is None:
            return PlanSnapshot(None)
        frontier = await self.frontier([root_id], scope, max_records=max_records)
        states = await self._get_keys(scope) if scope else {}
        flagged = False
        if root.supersedes and flag is not None:
            flagged = bool(await self._decisions(flag.query(root.supersedes)))
        return PlanSnapshot(root, frontier, states, flagged)

    async def _snapshot_and_log(
        self,
        root_id: str,
        scope: list[str],
        max_records: int,
        decide: Callable[[PlanSnapshot], Decision | None],
        flag: Flag | None = None,
    ) -> tuple[PlanSnapshot, int | None]:
        """Backends may override to read, decide and record in one round trip."""
        snap = await self._snapshot(root_id, scope, max_records, flag)
        decision = decide(snap)
        return snap, (await self._append_decision(decision) if decision is not None else None)

    async def _append_decision(self, decision: Decision) -> int:
        """Store one decision-log entry; return its id."""
        raise NotImplementedError

    async def _wait_for_change(self, since: int, timeout: float) -> None:
        """Return when a change after `since` may exist; a hint only (callers re-read)."""
        await asyncio.sleep(min(self.poll_interval, timeout))

    async def setup(self) -> None:
        """Create or migrate the schema; idempotent."""

    async def aclose(self) -> None:
        """Release connections."""

    # ---- lifecycle

    async def __aenter__(self) -> AsyncStore:
        await self.setup()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ---- ownership

    async def own(self, key: str, owner: str, *, by: str | None = None) -> Change:
        """Assign the first owner of `key`. Raises `AlreadyOwnedError` if it has one."""
        validate_key(key, self.limits)
        validate_agent(owner, self.limits)
        by = validate_agent(by, self.limits) if by is not None else owner
        return (await self._apply(WriteBatch(ops=(AssignOwner(key, owner, by),))))[0]

    async def transfer(self, key: str, new_owner: str, *, by: str) -> Change:
        """Hand `key` to `new_owner`; only the current owner may."""
        validate_key(key, self.limits)
        validate_agent(new_owner, self.limits)
        validate_agent(by, self.limits)
        return (await self._apply(WriteBatch(ops=(TransferOwner(key, new_owner, by),))))[0]

    async def owner(self, key: str) -> str | None:
        state = (await self._get_keys([validate_key(key, self.limits)])).get(key)
        return state.owner if state else None

    # ---- writes

    async def put(
        self,
        key: str,
        value: JSON,
        *,
        author: str,
        parents: Iterable[str] = (),
        kind: str = KIND_FACT,
        expected_head: str | _Current | None = CURRENT,
    ) -> Record:
        """Store a new version of `key` and advance its head, atomically; owner only.

        `expected_head` is the head the writer last saw (None: the key has no version yet). The
        default reads it just before writing, which still fails on a concurrent writer.

        Raises:
            NotOwnerError, HeadConflictError (carries the current head), UnknownKeyError,
            UnknownRecordError (a parent the store does not hold), and the validation errors.
        """
        record = Record.create(
            key, value, author=author, parents=parents, kind=kind, limits=self.limits
        )
        if isinstance(expected_head, _Current):
            state = (await self._get_keys([key])).get(key)
            if state is None:
                raise UnknownKeyError(key)
            if state.owner != author:
                raise NotOwnerError(key, author, state.owner)
            expected = state.head
        else:
            expected = validate_record_id(expected_head) if expected_head is not None else None
        batch = WriteBatch(records=(record,), ops=(AdvanceHead(key, record.id, expected, author),))
        await self._apply(batch)
        return record

    async def add(
        self,
        key: str,
        value: JSON,
        *,
        author: str,
        parents: Iterable[str] = (),
        kind: str = KIND_FACT,
        supersedes: str | None = None,
        decisions: Iterable[Decision] = (),
    ) -> Record:
        """Store a derived record (a plan, a candidate) without touching any head.

        Raises:
            UnknownRecordError: a parent or `supersedes` id the store does not hold.
        """
        record = Record.create(
            key,
            value,
            author=author,
            parents=parents,
            kind=kind,
            supersedes=supersedes,
            limits=self.limits,
        )
        await self._apply(WriteBatch(records=(record,), decisions=self._bounded(decisions)))
        return record

    async def advance(
        self,
        key: str,
        record_id: str,
        *,
        by: str,
        expected_head: str | None,
        decisions: Iterable[Decision] = (),
    ) -> Change:
        """Point `key`'s head at an already stored version of it (compare-and-set, owner only)."""
        validate_key(key, self.limits)
        validate_record_id(record_id)
        validate_agent(by, self.limits)
        if expected_head is not None:
            validate_record_id(expected_head)
        batch = WriteBatch(
            ops=(AdvanceHead(key, record_id, expected_head, by),),
            decisions=self._bounded(decisions),
        )
        return (await self._apply(batch))[0]

    async def write(self, batch: WriteBatch) -> list[Change]:
        """Apply a prepared batch atomically: all of it or none of it.

        Raises:
            IntegrityError: a record whose fields do not hash to its id.
            and everything `put`, `advance`, `own` and `transfer` raise.
        """
        return await self._apply(self._checked(batch))

    def _checked(self, batch: WriteBatch) -> WriteBatch:
        """Re-derive every record of a hand-built batch and validate its ops, before any I/O.

        `Record` is a plain dataclass, so a caller can build one whose id does not match its
        content (or whose `value_json` is missing); storing it would plant a corrupt record.
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
                limits=self.limits,
            )
            if fresh.id != rec.id or not rec.created_at:
                raise IntegrityError(
                    rec.id, "fields do not hash to this id; build records with Record.create"
                )
            records.append(fresh)
        for op in batch.ops:
            validate_key(op.key, self.limits)
            validate_agent(op.by, self.limits)
            if isinstance(op, AssignOwner):
                validate_agent(op.owner, self.limits)
            elif isinstance(op, TransferOwner):
                validate_agent(op.new_owner, self.limits)
            else:
                validate_record_id(op.record_id)
                if op.expected is not None:
                    validate_record_id(op.expected)
        return WriteBatch(tuple(records), batch.ops, self._bounded(batch.decisions))

    def _bounded(self, decisions: Iterable[Decision]) -> tuple[Decision, ...]:
        return tuple(bound_decision(d, self.limits) for d in decisions)

    # ---- reads

    async def get(self, record_id: str) -> Record:
        validate_record_id(record_id)
        found = await self._get_records([record_id])
        if record_id not in found:
            raise UnknownRecordError([record_id])
        return found[record_id]

    async def resolve_id(self, ref: str) -> str:
        """The full record id for `ref`: a full id, or a unique hex prefix of 8+ digits (as git).

        Raises `InvalidValueError` for anything else, `UnknownRecordError` when no stored record
        starts with the prefix, and `AmbiguousIdError` (listing the candidates) when several do.
        """
        text = ref.strip().lower() if isinstance(ref, str) else ref
        if isinstance(text, str) and len(text) == 64:
            return validate_record_id(text)
        if not isinstance(text, str) or not SHORT_ID_RE.fullmatch(text):
            raise InvalidValueError(
                f"{ref!r} is not a record id: give the 64 hex digits or a unique prefix "
                f"of at least {MIN_SHORT_ID} of them"
            )
        found = await self._ids_with_prefix(text, AMBIGUOUS_SHOWN + 1)
        if not found:
            raise UnknownRecordError([text], what="record id prefix")
        if len(found) > 1:
            raise AmbiguousIdError(text, found[:AMBIGUOUS_SHOWN])
        return found[0]

    async def get_many(self, ids: Iterable[str]) -> dict[str, Record]:
        """The records the store holds among `ids` (missing ones are simply absent)."""
        wanted = list(dict.fromkeys(ids))
        for rid in wanted:
            validate_record_id(rid)
        return await self._get_records(wanted) if wanted else {}

    async def head(self, key: str) -> str | None:
        """Current head of `key`. Raises `UnknownKeyError` when the key has no owner."""
        state = (await self._get_keys([validate_key(key, self.limits)])).get(key)
        if state is None:
            raise UnknownKeyError(key)
        return state.head

    async def states(self, keys: Iterable[str]) -> dict[str, KeyState]:
        """Owner and head of each key that has an owner (others are absent)."""
        wanted = sorted({validate_key(k, self.limits) for k in keys})
        return await self._get_keys(wanted) if wanted else {}

    async def heads(self, keys: Iterable[str]) -> dict[str, str | None]:
        return {k: s.head for k, s in (await self.states(keys)).items()}

    async def keys(self, prefix: str = "") -> list[KeyState]:
        return await self._list_keys(prefix)

    async def frontier(
        self,
        roots: Iterable[str],
        scope: Iterable[str],
        *,
        max_records: int = DEFAULT_MAX_RECORDS,
    ) -> Frontier:
        """Dependency frontier of the plan(s) `roots` for the keys in `scope` (see `lineage`)."""
        roots, scope = list(roots), sorted(set(scope))
        pre = await self._prefetch_lineage(roots, scope, max_records)
        if pre is None:
            return await frontier_async(self._get_records, roots, scope, max_records=max_records)
        prefetched = pre

        async def lookup(ids: list[str]) -> dict[str, Record]:
            got = {i: prefetched[i] for i in ids if i in prefetched}
            rest = [i for i in ids if i not in prefetched]
            if rest:  # unknown ids, or a prefetch cut at the bound
                got.update(await self._get_records(rest))
            return got

        return await frontier_async(lookup, roots, scope, max_records=max_records)

    async def snapshot(
        self,
        root_id: str,
        scope: Iterable[str],
        *,
        max_records: int = DEFAULT_MAX_RECORDS,
        flag: Flag | None = None,
    ) -> PlanSnapshot:
        """The record `root_id` (None if unknown), its frontier over `scope`, the owners and
        heads of `scope`, and (with `flag`) whether the plan it supersedes was flagged in the
        decision log; one round trip on SQLite."""
        validate_record_id(root_id)
        keys = sorted({validate_key(k, self.limits) for k in scope})
        return await self._snapshot(root_id, keys, max_records, flag)

    async def snapshot_and_log(
        self,
        root_id: str,
        scope: Iterable[str],
        decide: Callable[[PlanSnapshot], Decision | None],
        *,
        max_records: int = DEFAULT_MAX_RECORDS,
        flag: Flag | None = None,
    ) -> tuple[PlanSnapshot, int | None]:
        """Read a snapshot, let `decide` (pure, fast, no I/O) turn it into a decision, and record
        that decision, in one round trip where the backend can (SQLite). Returns the snapshot
        and the decision id (None when `decide` returned None)."""
        validate_record_id(root_id)
        keys = sorted({validate_key(k, self.limits) for k in scope})

        def decide_bounded(snap: PlanSnapshot) -> Decision | None:
            decision = decide(snap)
            return None if decision is None else bound_decision(decision, self.limits)

        return await self._snapshot_and_log(root_id, keys, max_records, decide_bounded, flag)

    async def lineage(self, record_id: str, *, max_records: int = DEFAULT_MAX_RECORDS) -> Frontier:
        """Every ancestor of `record_id` (a frontier with an empty scope)."""
        return await self.frontier([record_id], (), max_records=max_records)

    # ---- change feed

    async def changes(self, since: int = 0, limit: int = 1000) -> list[Change]:
        return await self._changes(since, limit)

    async def last_seq(self) -> int:
        seq = 0
        while batch := await self._changes(seq, 10_000):
            seq = batch[-1].seq
        return seq

    async def subscribe(
        self, since: int = 0, *, idle_timeout: float | None = None
    ) -> AsyncIterator[Change]:
        """Yield every change after `since`, forever (or until idle for `idle_timeout` s)."""
        loop = asyncio.get_running_loop()
        idle_since = loop.time()
        while True:
            batch = await self._changes(since, 1000)
            if batch:
                for change in batch:
                    since = change.seq
                    yield change
                idle_since = loop.time()
                continue
            # Measure idleness by the clock: a backend's wait may return early (a wake-up hint)
            # or use the whole timeout (LISTEN), so counting poll intervals would be wrong.
            # Each wait is capped at the poll interval, so a notification missed before LISTEN
            # took effect delays a reader by one interval at most.
            step = self.poll_interval
            if idle_timeout is not None:
                left = idle_timeout - (loop.time() - idle_since)
                if left <= 0:
                    return
                step = min(step, left)
            await self._wait_for_change(since, max(step, 0.001))

    # ---- decision log

    async def log(self, decision: Decision) -> int:
        """Append one entry to the decision log; return its id. Strings and payload are cut to
        the store's audit bounds (`StoreLimits.max_audit_field_bytes`)."""
        return await self._append_decision(bound_decision(decision, self.limits))

    async def decisions(
        self,
        *,
        source: str | None = None,
        tool: str | None = None,
        verdict: str | None = None,
        agent: str | None = None,
        plan: str | None = None,
        reasons: Iterable[str] = (),
        limit: int = 100,
    ) -> list[Decision]:
        """Newest first; `reasons` keeps entries whose reason is one of them."""
        return await self._decisions(
            DecisionQuery(source, tool, verdict, agent, plan, limit, reasons=tuple(reasons))
        )

    def now(self) -> str:
        return utc_now()
