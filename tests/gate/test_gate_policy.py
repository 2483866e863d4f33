"""Declared scopes: TOML loading, template filling, and every way a policy can be wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from planfence.plugins.gate import KeyTemplate, Policy, PolicyError, ScopeError

GOOD = """
[tools.ship_order]
depends_on = ["order/{order_id}", "address/{customer}"]

[tools.get_weather]
ungated = true
"""


def test_loads_scopes_and_exemptions(tmp_path: Path) -> None:
    f = tmp_path / "policy.toml"
    f.write_text(GOOD)
    policy = Policy.load(f)
    ship = policy.get("ship_order")
    assert ship is not None
    assert ship.scope({"order_id": "7", "customer": "ana"}) == ("address/ana", "order/7")
    weather = policy.get("get_weather")
    assert weather is not None and weather.ungated
    assert policy.get("unknown") is None


def test_integer_and_nested_arguments_fill_templates() -> None:
    t = KeyTemplate.parse("order/{order.id}/line/{n}")
    assert t.fill({"order": {"id": 42}, "n": 3}) == "order/42/line/3"


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ({}, "missing"),
        ({"order_id": None}, "string or integer"),
        ({"order_id": True}, "string or integer"),
        ({"order_id": ["a"]}, "string or integer"),
        ({"order_id": "a/b"}, "cannot name a key segment"),
        ({"order_id": ""}, "cannot name a key segment"),
        ({"order_id": "bad key"}, "invalid key"),
    ],
)
def test_unresolvable_scope_is_an_error(args: dict[str, object], why: str) -> None:
    tool = Policy().declare("ship", ["order/{order_id}"]).get("ship")
    assert tool is not None
    with pytest.raises(ScopeError, match=why):
        tool.scope(args)


@pytest.mark.parametrize(
    ("text", "line", "why"),
    [
        ("[tools.a]\ndepends_on = [\n", 3, "invalid TOML"),
        ("\n\n[tools.a]\ndepends_on = 'x'\n", 3, "depends_on must be a list"),
        ("[tools.a]\nungated = 'yes'\n", 1, "ungated must be true or false"),
        ("[tools.a]\n", 1, "declare depends_on"),
        ("[tools.a]\nungated = true\ndepends_on = ['k']\n", 1, "either ungated or"),
        ("[tools.a]\ndepends_on = ['k/{x:>3}']\n", 1, "bad placeholder"),
        ("[tools.a]\ndepends_on = ['k/{']\n", 1, "bad key template"),
        ("[tools.a]\ndepends_on = ['bad key']\n", 1, "invalid key"),
        ("[tools.a]\ndepend_on = ['k']\n", 1, "unknown field 'depend_on'"),
        ("[tool.a]\ndepends_on = ['k']\n", 1, "unknown top-level entry 'tool'"),
    ],
)
def test_broken_policy_files_name_line_and_reason(
    tmp_path: Path, text: str, line: int, why: str
) -> None:
    f = tmp_path / "p.toml"
    f.write_text(text)
    with pytest.raises(PolicyError, match=why) as info:
        Policy.load(f)
    assert info.value.line == line
    assert f"{f}:{line}" in str(info.value)


def test_missing_policy_file_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read policy file"):
        Policy.load(tmp_path / "nope.toml")


def test_declare_returns_a_new_policy() -> None:
    base = Policy()
    extended = base.declare("t", ["k/{a}"])
    assert base.get("t") is None
    assert extended.get("t") is not None


def test_policy_round_trips_through_its_dict_form() -> None:
    policy = Policy.from_toml(GOOD)
    again = Policy.coerce(policy.to_dict())
    assert again.to_dict() == policy.to_dict()
    assert Policy.coerce(GOOD).to_dict() == policy.to_dict()
    assert Policy.coerce(policy) is policy
    ship = again.get("ship_order")
    assert ship is not None
    assert ship.scope({"order_id": 1, "customer": "b"}) == ("address/b", "order/1")
