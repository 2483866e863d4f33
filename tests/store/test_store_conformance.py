"""The conformance suite (`planfence.shared_memory.conformance`) on every backend we ship
(memory, SQLite on its thread and on the event loop, PostgreSQL) and on a toy backend that
implements only the primitives."""

from __future__ import annotations

import pytest
from toy_store import ToyStore

from planfence.shared_memory import create_async_store
from planfence.shared_memory.conformance import CHECKS, TAMPER, TAMPER_HEADS, run_check
from planfence.shared_memory.conformance.checks_leases import (
    NEEDS_LEASES,
    a_backend_without_leases_refuses_them,
)
from planfence.shared_memory.conformance.checks_races import RACE_CHECKS
from planfence.shared_memory.conformance.runner import Check


def check_id(check: Check) -> str:
    return check.__name__  # type: ignore[attr-defined,no-any-return]


@pytest.mark.parametrize("check", CHECKS, ids=check_id)
async def test_backend_conforms(check: Check, store_url: str) -> None:
    ran = await run_check(
        check, lambda limits: create_async_store(store_url, limits=limits), {TAMPER, TAMPER_HEADS}
    )
    # Every backend we ship holds leases, so only the check for those without is skipped; the
    # race of shared writers runs on SQLite and PostgreSQL (the memory store is one process's).
    shared = not store_url.startswith("memory:")
    assert ran == (
        check is not a_backend_without_leases_refuses_them and (shared or check not in RACE_CHECKS)
    )


@pytest.mark.parametrize("check", CHECKS, ids=check_id)
async def test_sqlite_on_the_event_loop_conforms(check: Check, sqlite_url: str) -> None:
    url = f"{sqlite_url}?io=loop"
    ran = await run_check(
        check, lambda limits: create_async_store(url, limits=limits), {TAMPER, TAMPER_HEADS}
    )
    assert ran == (check is not a_backend_without_leases_refuses_them)


@pytest.mark.parametrize("check", CHECKS, ids=check_id)
async def test_toy_backend_conforms(check: Check) -> None:
    # The toy backend holds no leases: it skips their checks and must refuse lease operations.
    # It lives in one process, so the race of shared writers is skipped too.
    ran = await run_check(check, lambda limits: ToyStore(limits=limits), {TAMPER, TAMPER_HEADS})
    assert ran == (check not in NEEDS_LEASES and check not in RACE_CHECKS)


async def test_a_check_needing_a_capability_is_skipped_without_it() -> None:
    from planfence.shared_memory.conformance.checks_records import (
        tampered_records_raise_integrity_errors,
    )

    check = tampered_records_raise_integrity_errors
    assert not await run_check(check, lambda limits: ToyStore(limits=limits))
