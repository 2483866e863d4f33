"""Declared scopes: TOML loading, template filling, and every way a policy can be wrong."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planfence.plugins.gate import Policy, PolicyError, ScopeError
from planfence.plugins.gate.policy import KeyTemplate

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
        # Each problem points at the line that holds it, not at its tool's [tools.NAME] line.
        ("\n\n[tools.a]\ndepends_on = 'x'\n", 4, "depends_on must be a list"),
        ("[tools.a]\nungated = 'yes'\n", 2, "ungated must be true or false"),
        ("[tools.a]\n", 1, "declare depends_on"),
        ("[tools.a]\nungated = true\ndepends_on = ['k']\n", 3, "either ungated or"),
        ("[tools.a]\ndepends_on = ['k/{x:>3}']\n", 2, "bad placeholder"),
        ("[tools.a]\ndepends_on = ['k/{']\n", 2, "bad key template"),
        ("[tools.a]\ndepends_on = ['bad key']\n", 2, "invalid key"),
        ("[tools.a]\ndepend_on = ['k']\n", 2, "unknown field 'depend_on'"),
        ("[tools.a]\ndepends_on = [\n  'ok/{x}',\n  'x//{y}',\n]\n", 4, "x//"),
        ("[tools.a]\ndescription = 'k'\ndepends_on = ['k']\nlease_ms = 0\n", 4, "lease_ms"),
        ("[tools]\na = { depends_on = ['bad key'] }\n", 2, "invalid key"),
        ("[tools.a]\ndepends_on = []\n", 2, "depends_on is empty"),
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


@pytest.mark.parametrize("value", ["7\n", "7\r", "7\x00", "\n"])
def test_control_characters_in_arguments_do_not_resolve(value: str) -> None:
    tool = Policy().declare("ship", ["order/{order_id}"]).get("ship")
    assert tool is not None
    with pytest.raises(ScopeError):
        tool.scope({"order_id": value})


@pytest.mark.parametrize(
    "template",
    ["bad key!/{x}", "order//{x}", "order/.{x}", "order/{x}\n", "{x}/ok\n", "/{x}", "{x}/"],
)
def test_templates_that_can_never_fill_to_a_key_fail_at_load(tmp_path: Path, template: str) -> None:
    f = tmp_path / "p.toml"
    f.write_text("[tools.ship]\ndepends_on = [" + json.dumps(template) + "]\n")  # TOML string
    with pytest.raises(PolicyError, match="ship") as info:
        Policy.load(f)
    assert repr(template) in str(info.value)
    assert info.value.line == 2
    with pytest.raises(PolicyError, match="ship"):
        Policy().declare("ship", [template])


@pytest.mark.parametrize("template", ["order/{x}", "{a}-{b}/{c}.json", "{x}", "k/{x.0}/v"])
def test_templates_that_can_fill_to_a_key_load(template: str) -> None:
    assert Policy().declare("ship", [template]).get("ship") is not None


def test_lint_lists_every_problem_and_the_declared_tools(tmp_path: Path) -> None:
    f = tmp_path / "p.toml"
    f.write_text(
        "[tools.a]\ndepends_on = ['bad key!/{x}']\n\n"
        "[tools.b]\nungated = true\n\n"
        "[tools.c]\ndepends_on = ['ok/{x}', 'x//{y}']\n"
    )
    problems = Policy.lint(f)
    assert [(p.line, "bad key!" in str(p) or "x//" in str(p)) for p in problems] == [
        (2, True),
        (8, True),
    ]
    g = tmp_path / "good.toml"
    g.write_text(GOOD)
    assert Policy.lint(g) == []
    policy = Policy.load(g)
    assert policy.tool_names == ("get_weather", "ship_order")
    assert policy.uncovered_tools(["ship_order", "rm_rf"]) == ["rm_rf"]
    assert policy.unused_tools(["ship_order"]) == ["get_weather"]


@given(st.dictionaries(st.text(max_size=5), st.one_of(st.text(max_size=5), st.integers())))
def test_a_tool_without_placeholders_has_one_scope_whatever_the_arguments(
    args: dict[str, object],
) -> None:
    fixed = Policy().declare("t", ["b/x", "a/y", "b/x"]).get("t")
    assert fixed is not None
    assert fixed.scope(args) == ("a/y", "b/x")


def test_a_tool_with_a_placeholder_fills_its_scope_on_every_call() -> None:
    tool = Policy().declare("t", ["config/main", "order/{order_id}"]).get("t")
    assert tool is not None
    assert tool.scope({"order_id": "7"}) == ("config/main", "order/7")
    assert tool.scope({"order_id": "8"}) == ("config/main", "order/8")
    with pytest.raises(ScopeError):
        tool.scope({})
