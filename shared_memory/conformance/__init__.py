"""The store contract, written once, for every backend: ours and third parties'.

A check is `async def check(store, ctx)`: it gets a fresh, set-up store and a `Context` that can
open more stores on the same place (with other limits) and says what the backend can do. A
backend's own test file runs every check:

    import pytest
    from planfence.shared_memory.conformance import CHECKS, TAMPER, run_check

    @pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
    async def test_my_backend(check, tmp_path):
        await run_check(check, lambda limits: MyStore(tmp_path, limits=limits), {TAMPER})

The factory builds (does not set up) a store on one fresh, empty place per test; it may be called
again within a check, and must then open the same place. Capabilities:

- `TAMPER`: the backend has `async _tamper_record(record_id, fields)`, which changes stored fields
  of a record (`fields` maps `key`, `value_json`, `parents`, `author`, `kind`, `supersedes`,
  `created_at` to stored values) or deletes it (`fields=None`), bypassing every check, so the
  integrity checks can prove that corruption is caught. Without it they are skipped.
- `TAMPER_HEADS`: the backend has `async _tamper_head(state)`, which overwrites a key's stored
  state (owner, head, sequence, epoch, head signature) with the `KeyState` given, bypassing
  every check: how a store that is not trusted would replay an older signed head.

Head leases are declared by the backend itself (`supports_leases`): the lease checks run on a
backend that holds them, and one that does not must refuse lease operations
(`LeasesUnsupportedError`), never ignore them. So are shared writers (`shared_writers`: several
processes may open one place and write): the race checks open several stores on the check's place
and make them contend for one key, and are skipped on a backend that does not declare it.
"""

from __future__ import annotations

from .checks_epochs import EPOCH_CHECKS
from .checks_journal import JOURNAL_CHECKS
from .checks_leases import LEASE_CHECKS
from .checks_lineage import LINEAGE_CHECKS
from .checks_races import RACE_CHECKS
from .checks_reassign import REASSIGN_CHECKS
from .checks_records import RECORD_CHECKS
from .checks_writes import WRITE_CHECKS
from .runner import TAMPER, TAMPER_HEADS, Check, raises, run_check

CHECKS: tuple[Check, ...] = (
    *RECORD_CHECKS,
    *WRITE_CHECKS,
    *EPOCH_CHECKS,
    *LINEAGE_CHECKS,
    *JOURNAL_CHECKS,
    *LEASE_CHECKS,
    *REASSIGN_CHECKS,
    *RACE_CHECKS,
)
"""Every conformance check, in a stable order."""

__all__ = [
    "CHECKS",
    "TAMPER",
    "TAMPER_HEADS",
    "raises",
    "run_check",
]
