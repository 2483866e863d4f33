"""`planfence policy lint`: a key whose values reach a tool's arguments outside its D(a).

The workflow: the planner reads an order and the customer's address, and the ship call carries
the address line. With `depends_on = ["order/{order_id}"]` only, a changed address would not stop
the call: the lint must name `address/{customer}`. With the address declared, it must say nothing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planfence.adapters.cli.main import main
from planfence.plugins.gate import Policy, SyncGate, ToolCall, find_decisions_sync
from planfence.plugins.gate.plans import create_plan_sync
from planfence.plugins.gate.values import digest, leaves, value_digests
from planfence.shared_memory import open_store

INCOMPLETE = '[tools.ship_order]\ndepends_on = ["order/{order_id}"]\n'
COMPLETE = '[tools.ship_order]\ndepends_on = ["order/{order_id}", "address/{customer}"]\n'


def workflow(url: str, policy_text: str, calls: int = 2) -> None:
    policy = Policy.from_toml(policy_text)
    with open_store(url) as store:
        store.own("order/7", "sales")
        store.own("address/ana", "ana")
        store.own("weather/lisbon", "meteo")
        order = store.put("order/7", {"status": "confirmed", "qty": 2}, author="sales")
        address = store.put("address/ana", {"line": "1 Harbour St", "zip": "1100"}, author="ana")
        weather = store.put("weather/lisbon", {"sky": "clear"}, author="meteo")
        with SyncGate(store, policy) as gate:  # closing it writes the allows it queued
            for _ in range(calls):
                plan = create_plan_sync(
                    store, author="planner", parents=[order.id, address.id, weather.id]
                )
                args = {"order_id": "7", "customer": "ana", "line": "1 Harbour St", "qty": 2}
                assert gate.check(ToolCall("ship_order", args, plan.id)).verdict == "allow"


def lint(capsys: pytest.CaptureFixture[str], policy: Path, url: str) -> tuple[int, dict]:
    code = main(["policy", "lint", str(policy), "--store", url, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_an_undeclared_key_that_fed_an_argument_is_reported(
    tmp_path: Path, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    workflow(sqlite_url, INCOMPLETE)
    policy = tmp_path / "policy.toml"
    policy.write_text(INCOMPLETE)
    code, data = lint(capsys, policy, sqlite_url)
    assert code == 1
    assert data["calls"] == 2
    [flow] = data["flows"]
    assert flow["tool"] == "ship_order"
    assert flow["key"] == "address/{customer}"  # the segment "ana" was the customer argument
    assert flow["calls"] == 2 and flow["arguments"] == ["line"]
    assert flow["example"]["record_key"] == "address/ana"
    assert flow["example"]["value_path"] == "line"
    # the weather record was read but fed nothing; the order is declared; qty=2 is too small
    # a value to prove anything


def test_a_complete_policy_reports_nothing(
    tmp_path: Path, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    workflow(sqlite_url, COMPLETE)
    policy = tmp_path / "policy.toml"
    policy.write_text(COMPLETE)
    code, data = lint(capsys, policy, sqlite_url)
    assert code == 0 and data["flows"] == [] and data["calls"] == 2


def test_a_policy_fixed_since_the_calls_is_not_nagged(
    tmp_path: Path, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    workflow(sqlite_url, INCOMPLETE)  # audited under the old policy
    policy = tmp_path / "policy.toml"
    policy.write_text(COMPLETE)
    code, data = lint(capsys, policy, sqlite_url)
    assert code == 0 and data["flows"] == []


def lint_process(policy: Path, url: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "planfence.adapters.cli", "policy", "lint", str(policy)]
    return subprocess.run(
        [*cmd, "--store", url], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_command_in_its_own_process(tmp_path: Path, sqlite_url: str) -> None:
    workflow(sqlite_url, INCOMPLETE, calls=1)
    policy = tmp_path / "policy.toml"
    policy.write_text(INCOMPLETE)
    proc = lint_process(policy, sqlite_url)
    assert proc.returncode == 1, proc.stderr
    assert "ship_order: address/{customer} fed line in 1 call(s)" in proc.stdout
    missing = lint_process(policy, f"sqlite:///{tmp_path / 'nope.db'}")
    assert missing.returncode != 0 and missing.stderr.startswith("planfence: error: ")


def test_the_audit_keeps_digests_not_values(sqlite_url: str) -> None:
    workflow(sqlite_url, INCOMPLETE, calls=1)
    with open_store(sqlite_url) as store:
        [entry] = find_decisions_sync(store, source="gate")
    text = json.dumps(entry.payload)
    assert "Harbour" not in text and "ana" not in text
    assert set(entry.payload["values"]) == {"order_id", "customer", "line", "qty"}


scalars = st.one_of(st.text(max_size=12), st.integers(-(10**6), 10**6))


@given(st.dictionaries(st.text(min_size=1, max_size=5), scalars, max_size=6), scalars)
def test_digests_match_exactly_the_equal_values(args: dict, probe: object) -> None:
    digests = value_digests(args)
    for path, value in args.items():
        if isinstance(value, str | int):
            assert digests[path] == digest(value)
            assert (digest(probe) == digests[path]) == (str(probe).strip() == str(value).strip())


@given(
    st.recursive(
        scalars,
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
        max_leaves=20,
    )
)
def test_leaves_only_yield_scalars_that_prove_something(value: object) -> None:
    for _, leaf in leaves(value):
        assert isinstance(leaf, str | int | float) and not isinstance(leaf, bool)
        assert len(str(leaf).strip()) >= 3 or abs(leaf) >= 10  # type: ignore[arg-type]
