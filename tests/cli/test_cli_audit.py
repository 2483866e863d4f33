"""`planfence audit`: newest first by decision time, and never a silent cut at `--limit`."""

from __future__ import annotations

import json

import pytest

from planfence.adapters.cli.main import main
from planfence.plugins.gate import Decision, Policy, SyncGate, ToolCall
from planfence.shared_memory import open_store
from planfence.shared_memory.records import KIND_PLAN

KEY = "order/7"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_audit_says_how_many_more_match(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    with open_store(sqlite_url) as store:
        for n in range(63):
            store.log(Decision(source="gate", verdict="block", reason="missing_plan", tool=f"t{n}"))
    code, out, err = run(capsys, "audit", "--store", sqlite_url)
    assert code == 0, err
    assert len(out.splitlines()) == 50  # the default limit
    assert err == "planfence: 13 more matching decisions not shown (--limit 63 shows them all)\n"

    code, out, err = run(capsys, "audit", "--store", sqlite_url, "--json", "--limit", "10")
    assert code == 0 and err == ""
    data = json.loads(out)
    assert (len(data["decisions"]), data["total"], data["more"]) == (10, 63, 53)
    assert [d["tool"] for d in data["decisions"]] == [f"t{n}" for n in range(62, 52, -1)]

    code, out, err = run(capsys, "audit", "--store", sqlite_url, "--limit", "63")
    assert (code, len(out.splitlines()), err) == (0, 63, "")
    code, out, err = run(capsys, "audit", "--store", sqlite_url, "--json", "--tool", "t7")
    assert json.loads(out)["more"] == 0 and len(json.loads(out)["decisions"]) == 1


def test_a_deferred_allow_is_listed_where_it_was_decided(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    """The allow is decided first and written last (the deferred audit writes it when the gate
    closes); the refusals decided after it come first in the list, as they happened."""
    with open_store(sqlite_url) as store:
        store.own(KEY, "sales")
        rec = store.put(KEY, {"status": "confirmed"}, author="sales")
        plan = store.add("plan/ship", {}, author="planner", parents=[rec.id], kind=KIND_PLAN)
        gate = SyncGate(store, Policy().declare("ship", depends_on=[KEY]), audit="deferred")
        try:
            assert gate.check(ToolCall("ship", {}, plan.id, agent="executor")).verdict == "allow"
            assert gate.check(ToolCall("ship", {}, None, agent="executor")).verdict == "block"
            assert (
                gate.check(ToolCall("undeclared", {}, plan.id, agent="executor")).verdict == "block"
            )
        finally:
            gate.close()
    code, out, err = run(capsys, "audit", "--store", sqlite_url)
    assert code == 0, err
    assert [line.split("\t")[4] for line in out.splitlines()] == ["block", "block", "allow"]
    code, out, err = run(capsys, "audit", "--store", sqlite_url, "--json")
    assert code == 0, err
    rows = json.loads(out)["decisions"]
    assert [(d["tool"], d["verdict"]) for d in rows] == [
        ("undeclared", "block"),
        ("ship", "block"),
        ("ship", "allow"),
    ]
    assert rows[2]["id"] > rows[0]["id"]  # the log received the allow last
    assert [d["at"] for d in rows] == sorted((d["at"] for d in rows), reverse=True)
