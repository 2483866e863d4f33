"""planfence.shared_memory: versioned public records, owners, heads, lineage and change feed.

Open a store (a SQLite file by default), give a key its owner, and write a version:

    from planfence.shared_memory import open_store
    with open_store("sqlite:///team.db") as store:
        store.own("trip/42/requirements", "planner")
        r3 = store.put("trip/42/requirements", {"destination": "Lisbon"}, author="planner")
"""

from .batches import WriteBatch, WriteResult
from .bridge import StoreBridge
from .errors import (
    ConfigError,
    HeadConflictError,
    IntegrityError,
    InvalidKeyError,
    LeaseHeldError,
    MissingExtraError,
    NotOwnerError,
    OwnershipError,
    PlanfenceError,
    StoreClosedError,
    StoreError,
    StoreUnavailableError,
    UnknownKeyError,
    UnknownRecordError,
    ValueTooLargeError,
)
from .factory import create_async_store, open_async_store, open_store
from .journal import Entry, JournalQuery
from .leases import Lease
from .model import Change, KeyState
from .reads import (
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
from .records import JSON, Record, StoreLimits
from .store import AsyncStore
from .sync import Portal, Store

__all__ = [
    "JSON",
    "AsyncStore",
    "Change",
    "ConfigError",
    "Entry",
    "GetChanges",
    "GetKeys",
    "GetOwnerChanges",
    "GetRecords",
    "HeadConflictError",
    "IdsWithPrefix",
    "IntegrityError",
    "InvalidKeyError",
    "JournalQuery",
    "KeyState",
    "Lease",
    "LeaseHeldError",
    "Lineage",
    "ListKeys",
    "MissingExtraError",
    "NotOwnerError",
    "OwnershipError",
    "PlanfenceError",
    "Portal",
    "QueryJournal",
    "ReadOp",
    "Record",
    "Store",
    "StoreBridge",
    "StoreClosedError",
    "StoreError",
    "StoreLimits",
    "StoreUnavailableError",
    "UnknownKeyError",
    "UnknownRecordError",
    "ValueTooLargeError",
    "WriteBatch",
    "WriteResult",
    "create_async_store",
    "open_async_store",
    "open_store",
]
