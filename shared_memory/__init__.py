"""planfence.shared_memory: versioned public records, owners, heads, lineage and change feed.

from planfence.shared_memory import open_store
with open_store("sqlite:///team.db") as store:
    store.own("trip/42/requirements", "planner")
    r3 = store.put("trip/42/requirements", {"destination": "Lisbon"}, author="planner")
"""

from .batches import AdvanceHead, AssignOwner, TransferOwner, WriteBatch, WriteResult
from .errors import (
    AdvancePendingError,
    AlreadyOwnedError,
    AmbiguousIdError,
    ConfigError,
    HeadConflictError,
    IntegrityError,
    InvalidKeyError,
    InvalidValueError,
    LeaseHeldError,
    LeasesUnsupportedError,
    MissingExtraError,
    NotOwnerError,
    OwnershipError,
    PlanFenceError,
    StoreError,
    StoreNotFoundError,
    StoreUnavailableError,
    UnknownKeyError,
    UnknownRecordError,
    ValueTooLargeError,
)
from .factory import (
    DEFAULT_STORE_URL,
    STORE_ENV,
    create_async_store,
    default_store_url,
    open_async_store,
    open_store,
)
from .journal import Entry, JournalQuery, ToEntry
from .leases import DropLease, ExpectHead, HoldKey, Lease
from .lineage import Frontier, frontier_async, frontier_sync, walk_frontier
from .model import CURRENT, Change, KeyState
from .reads import (
    GetChanges,
    GetKeys,
    GetRecords,
    IdsWithPrefix,
    Lineage,
    ListKeys,
    QueryJournal,
    ReadFlow,
    ReadOp,
    frontier_flow,
)
from .records import (
    JSON,
    KIND_FACT,
    KIND_PLAN,
    Record,
    StoreLimits,
    canonical_json,
    is_record_id,
    validate_agent,
    validate_key,
)
from .replica import Replica
from .store import AsyncStore
from .sync import Portal, Store, StoreBridge
from .urls import redact_url

__all__ = [
    "CURRENT",
    "DEFAULT_STORE_URL",
    "JSON",
    "KIND_FACT",
    "KIND_PLAN",
    "STORE_ENV",
    "AdvanceHead",
    "AdvancePendingError",
    "AlreadyOwnedError",
    "AmbiguousIdError",
    "AssignOwner",
    "AsyncStore",
    "Change",
    "ConfigError",
    "DropLease",
    "Entry",
    "ExpectHead",
    "Frontier",
    "GetChanges",
    "GetKeys",
    "GetRecords",
    "HeadConflictError",
    "HoldKey",
    "IdsWithPrefix",
    "IntegrityError",
    "InvalidKeyError",
    "InvalidValueError",
    "JournalQuery",
    "KeyState",
    "Lease",
    "LeaseHeldError",
    "LeasesUnsupportedError",
    "Lineage",
    "ListKeys",
    "MissingExtraError",
    "NotOwnerError",
    "OwnershipError",
    "PlanFenceError",
    "Portal",
    "QueryJournal",
    "ReadFlow",
    "ReadOp",
    "Record",
    "Replica",
    "Store",
    "StoreBridge",
    "StoreError",
    "StoreLimits",
    "StoreNotFoundError",
    "StoreUnavailableError",
    "ToEntry",
    "TransferOwner",
    "UnknownKeyError",
    "UnknownRecordError",
    "ValueTooLargeError",
    "WriteBatch",
    "WriteResult",
    "canonical_json",
    "create_async_store",
    "default_store_url",
    "frontier_async",
    "frontier_flow",
    "frontier_sync",
    "is_record_id",
    "open_async_store",
    "open_store",
    "redact_url",
    "validate_agent",
    "validate_key",
    "walk_frontier",
]
