"""Leases across processes (SQLite and PostgreSQL): a lease taken in another process holds the
owner's head advances back; a holder killed mid-lease blocks nobody past its lease_ms. And
`planfence bench window --quick`: with fencing or leases no effect lands on a stale head."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from planfence.adapters.cli.main import main
from planfence.shared_memory import LeaseHeldError, open_async_store

HOLDER = """
import asyncio, sys
from planfence.shared_memory import open_async_store

async def main(url, ttl):
    store = await open_async_store(url)
    head = await store.head("order/7")
    lease = await store.lease({"order/7": head}, holder="executor", ttl_ms=ttl)
    print("leased", flush=True)
    if sys.stdin.readline().strip() == "release":
        await store.release(lease)
        print("released", flush=True)
    await store.aclose()

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def holder(url: str, ttl_ms: int) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, str(ttl_ms)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "leased"
    return proc


def finish(proc: subprocess.Popen[str]) -> None:
    proc.wait(timeout=60)
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            stream.close()


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return str(request.getfixturevalue("pg_url"))


async def test_a_lease_in_another_process_holds_the_owner(shared_url: str) -> None:
    store = await open_async_store(shared_url)
    try:
        await store.own("order/7", "sales")
        await store.put("order/7", 1, author="sales")
        proc = holder(shared_url, 60_000)
        try:
            with pytest.raises(LeaseHeldError) as err:
                await store.put("order/7", 2, author="sales", wait=False)
            assert err.value.holders == ("executor",)
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("release\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "released"
        finally:
            finish(proc)
        record = await store.put("order/7", 2, author="sales", wait=False)
        assert await store.head("order/7") == record.id
    finally:
        await store.aclose()


async def test_a_killed_holder_blocks_nobody_past_its_lease(shared_url: str) -> None:
    store = await open_async_store(shared_url)
    try:
        await store.own("order/7", "sales")
        await store.put("order/7", 1, author="sales")
        proc = holder(shared_url, 300)
        proc.kill()  # the holder crashes with its lease held
        finish(proc)
        with pytest.raises(LeaseHeldError):
            await store.put("order/7", 2, author="sales", wait=False)
        record = await store.put("order/7", 3, author="sales")  # waits for the lease to end
        assert await store.head("order/7") == record.id
    finally:
        await store.aclose()


@pytest.mark.slow
def test_bench_window_quick_no_effect_on_stale_with_fences(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "window.json"
    assert main(["bench", "window", "--quick", "--json", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert json.loads(out.read_text()) == printed
    rows = {r["mode"]: r for r in printed["rows"]}
    assert set(rows) == {"gate", "fence", "lease"}
    for row in rows.values():
        assert set(row) >= {
            "mode",
            "actions",
            "effects",
            "effects_on_stale",
            "owner_wait_p50_ms",
            "owner_wait_p99_ms",
        }
        assert 0 <= row["effects_on_stale"] <= row["effects"] <= row["actions"]
    assert rows["fence"]["effects_on_stale"] == 0
    assert rows["lease"]["effects_on_stale"] == 0
    assert rows["lease"]["effects"] > 0  # the lease lets calls act, it does not just refuse
    assert printed["stores"][0]["backend"] == "sqlite"  # a temporary store, never the default
