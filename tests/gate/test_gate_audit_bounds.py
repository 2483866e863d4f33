"""The audit log stores bounded rows: plan references, tool names, agent ids and messages that
come from a caller are cut at `StoreLimits.max_audit_field_bytes`, with a marker saying so."""

from __future__ import annotations

import json
import sqlite3

import pytest

from planfence.plugins.gate import Decision, Gate, Policy, ToolCall, find_decisions
from planfence.shared_memory import (
    AsyncStore,
    StoreLimits,
    create_async_store,
)
from planfence.shared_memory.audit import truncate_text
from planfence.shared_memory.backends.sqlite import sqlite_path_from_url

POLICY = Policy().declare("ship", ["order/{order_id}"])
HUGE = 4 * 1024 * 1024
BOUND = 64 * 1024  # far above the default field bound, far below the input
FIELD = StoreLimits().max_audit_field_bytes


def _size(d: Decision) -> int:
    fields = (d.source, d.verdict, d.reason, d.agent, d.tool, d.plan, d.at)
    return sum(len((f or "").encode()) for f in fields) + len(json.dumps(dict(d.payload)))


async def test_a_4mb_plan_string_is_blocked_and_recorded_bounded(astore: AsyncStore) -> None:
    v = await Gate(astore, POLICY).check(
        ToolCall("ship", {"order_id": "7"}, "p" * HUGE, agent="shipper")
    )
    assert (v.verdict, v.reason) == ("block", "unknown_plan")
    [logged] = await find_decisions(astore, source="gate")
    assert (logged.verdict, logged.reason, logged.tool) == ("block", "unknown_plan", "ship")
    assert _size(logged) < BOUND
    assert logged.plan is not None and logged.plan.startswith("p" * 100)
    assert logged.plan.endswith(f"…[truncated {HUGE - FIELD} bytes]")


async def test_huge_tool_agent_and_argument_values_are_bounded(astore: AsyncStore) -> None:
    gate = Gate(astore, POLICY)
    v = await gate.check(ToolCall("t" * HUGE, {}, None, agent="a" * HUGE))
    assert (v.verdict, v.reason) == ("block", "undeclared_tool")
    v = await gate.check(ToolCall("ship", {"order_id": "x y" * HUGE}, None))
    assert (v.verdict, v.reason) == ("block", "scope_unresolved")
    logged = await find_decisions(astore, source="gate")
    assert [d.reason for d in logged] == ["scope_unresolved", "undeclared_tool"]
    assert all(_size(d) < BOUND for d in logged)
    assert "[truncated" in (logged[1].tool or "") and "[truncated" in (logged[1].agent or "")


async def test_every_way_into_the_log_is_bounded(astore: AsyncStore) -> None:
    huge = Decision(
        source="proxy",
        verdict="block",
        reason="r" * HUGE,
        tool="t" * HUGE,
        payload={"message": "m" * HUGE, "nested": {"args": ["v" * HUGE] * 3}, "k" * HUGE: 1},
    )
    await astore.log(huge)
    rec = await astore.add("notes/1", {"n": 1}, author="a", entries=[huge])
    assert rec.key == "notes/1"
    logged = await find_decisions(astore, source="proxy")
    assert len(logged) == 2
    for d in logged:
        assert _size(d) < BOUND
        assert d.payload["message"].startswith("m" * 100)


def _row_size(store_url: str) -> int:
    sql = "SELECT length(subject) + length(detail) + length(labels) FROM {}"
    if store_url.startswith("sqlite"):
        with sqlite3.connect(sqlite_path_from_url(store_url)) as conn:
            return int(conn.execute(sql.format("journal")).fetchone()[0])
    import psycopg

    from planfence.shared_memory.backends.postgres import split_schema

    conninfo, schema = split_schema(store_url)
    with psycopg.connect(conninfo, options=f"-c search_path={schema}") as conn:
        row = conn.execute(sql.format("pf_journal")).fetchone()
        assert row is not None
        return int(row[0])


async def test_the_stored_row_is_bounded(store_url: str) -> None:
    if store_url.startswith("memory://"):
        pytest.skip("the memory backend has no rows to measure")
    store = create_async_store(store_url)
    async with store:
        await Gate(store, POLICY).check(
            ToolCall("ship", {"order_id": "7"}, "p" * HUGE, agent="x" * HUGE)
        )
    assert _row_size(store_url) < BOUND


async def test_the_bound_is_configurable() -> None:
    store = create_async_store("memory://", limits=StoreLimits(max_audit_field_bytes=16))
    async with store:
        await store.log(Decision(source="s", verdict="block", plan="abcdefghijklmnopqrstuvwxyz"))
        [d] = await find_decisions(store, source=None)
    assert d.plan == "abcdefghijklmnop…[truncated 10 bytes]"
    with pytest.raises(ValueError, match="max_audit_field_bytes"):
        StoreLimits(max_audit_field_bytes=0)


def test_truncation_cuts_on_a_character_boundary() -> None:
    text = "é" * 10  # two bytes each
    cut = truncate_text(text, 5)
    assert cut == "éé…[truncated 16 bytes]"
    assert truncate_text("short", 5) == "short"
