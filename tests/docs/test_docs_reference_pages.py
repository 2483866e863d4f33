"""The reference pages say what the code does: the policy file format (every TOML example loads
with the real loader, every template example fills as the table says, the error example prints
what the page shows), the store URLs (every example opens or is refused as the page says) and
the wire formats (every JSON example validates against its model; the `_meta` keys and reason
codes are exactly the code's)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from docpages import block, page_blocks

from planfence.plugins.gate import Policy, ScopeError
from planfence.shared_memory import ConfigError, open_store
from planfence.shared_memory.errors import StoreNotFoundError

POLICY = "docs/reference/policy.md"
URLS = "docs/reference/store-urls.md"
WIRE = "docs/reference/wire.md"
REPO = Path(__file__).resolve().parents[2]


def table(page: str, heading: str, index: int = 0) -> list[list[str]]:
    """The rows (cells, unescaped, backquotes kept) of the `index`th table under `heading`."""
    text = (REPO / page).read_text(encoding="utf-8")
    section = re.split(r"^#{1,4} ", text, flags=re.M)
    body = next(s for s in section if s.startswith(heading + "\n"))
    tables = re.findall(r"((?:^\|.*\|\n)+)", body, re.M)
    rows = [
        [c.strip().replace("\\|", "|").replace("\\*", "*") for c in re.split(r"(?<!\\)\|", r)[1:-1]]
        for r in tables[index].splitlines()
    ]
    return rows[2:]  # without the header and its rule


def code(cell: str) -> str:
    m = re.fullmatch(r"`(.*)`", cell)
    assert m, cell
    return m.group(1)


# ---- policy.md


def test_policy_format_example_loads_as_described() -> None:
    policy = Policy.from_toml(block(POLICY, "The format", "toml"), source="policy.toml")
    assert policy.tool_names == ("deploy", "get_weather", "ship_order")
    ship = policy.get("ship_order")
    assert ship is not None
    assert ship.scope({"order_id": 7, "customer": {"id": "c-9"}}) == (
        "customer/c-9/address",
        "order/7",
    )
    weather = policy.get("get_weather")
    assert weather is not None and weather.ungated
    deploy = policy.get("deploy")
    assert deploy is not None
    assert deploy.lease_ms == 2000 and deploy.agents == frozenset({"executor"})


def test_policy_fields_table_names_every_field_the_loader_accepts(tmp_path: Path) -> None:
    fields = {code(row[0]) for row in table(POLICY, "The format")}
    assert fields == {"depends_on", "ungated", "lease_ms", "agents", "description"}
    for name in fields:  # each one loads (with what it needs beside it) ...
        spec = {
            "depends_on": 'depends_on = ["a/{x}"]',
            "ungated": "ungated = true",
            "lease_ms": 'depends_on = ["a"]\nlease_ms = 600000',
            "agents": 'depends_on = ["a"]\nagents = ["executor"]',
            "description": 'ungated = true\ndescription = "x"',
        }[name]
        Policy.from_toml(f"[tools.t]\n{spec}\n")
    with pytest.raises(ConfigError, match="unknown field 'timeout'"):  # ... and nothing else
        Policy.from_toml('[tools.t]\ndepends_on = ["a"]\ntimeout = 3\n')
    with pytest.raises(ConfigError, match="between 1 and 600000"):
        Policy.from_toml('[tools.t]\ndepends_on = ["a"]\nlease_ms = 600001\n')
    with pytest.raises(ConfigError, match="lease_ms needs depends_on"):
        Policy.from_toml("[tools.t]\nungated = true\nlease_ms = 5\n")
    quoted = Policy.from_toml('[tools."fs/read_file"]\nungated = true\n')
    assert quoted.tool_names == ("fs/read_file",)
    with pytest.raises(ConfigError, match="invalid tool name"):
        Policy.from_toml('[tools."read file"]\nungated = true\n')


def test_every_template_example_fills_to_the_key_the_page_shows() -> None:
    rows = table(POLICY, "Key templates")
    assert len(rows) >= 6
    for _placeholder, _takes, template, args, key in rows:
        tp = Policy.from_dict({"tools": {"t": {"depends_on": [code(template)]}}}).get("t")
        assert tp is not None
        assert tp.scope(json.loads(code(args))) == (code(key),), template


def test_policy_templates_refuse_what_the_page_says() -> None:
    policy = Policy.from_toml(
        '[tools.t]\ndepends_on = ["order/{id}", "files/{p:path}"]\n', source="policy.toml"
    )
    tool = policy.get("t")
    assert tool is not None
    for args in (
        {"p": "a"},  # missing
        {"id": 1.5, "p": "a"},  # not a string or integer
        {"id": "", "p": "a"},
        {"id": "a/b", "p": "a"},
        {"id": "1", "p": "a//b"},
        {"id": "1", "p": "../etc"},
        {"id": "1", "p": "_/x"},  # would be the absolute path's key
        {"id": "x" * 300, "p": "a"},
    ):
        with pytest.raises(ScopeError):  # the gate blocks the call: scope_unresolved
            tool.scope(args)


def test_several_templates_example() -> None:
    policy = Policy.from_toml(block(POLICY, "Several templates, one scope", "toml"))
    tool = policy.get("transfer")
    assert tool is not None
    assert tool.scope({"from_account": "a-1", "to_account": "a-2"}) == (
        "account/a-1",
        "account/a-2",
        "fx/rates",
    )


def test_policy_errors_example_prints_what_the_page_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "policy.toml").write_text(block(POLICY, "Errors", "toml"), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLANFENCE_")}
    proc = subprocess.run(
        [sys.executable, "-m", "planfence.adapters.cli", "policy", "check", "policy.toml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr == block(POLICY, "Errors", "text")
    with pytest.raises(ConfigError) as first:
        Policy.load("policy.toml")
    assert str(first.value) == block(POLICY, "Errors", "text").splitlines()[0].removeprefix(
        "planfence: error: "
    )


def test_policy_code_example_runs() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", block(POLICY, "The same policy in code")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "'ship_order': {'depends_on': ['order/{order_id}'], 'lease_ms': 2000}" in proc.stdout


# ---- store-urls.md


def test_every_url_that_the_page_says_opens_builds_its_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team.db").touch()  # `?create=0` opens an existing file
    open_store("sqlite:///team.db").close()
    rows = table(URLS, "Examples", 0)
    assert len(rows) >= 6
    for n, (url_cell, _opens) in enumerate(rows):
        url = code(url_cell)
        if url.startswith("postgresql://"):
            pytest.importorskip("psycopg")
            from planfence.shared_memory import create_async_store
            from planfence.shared_memory.backends.postgres_conn import split_options

            store = create_async_store(url)  # built, not connected: the host is an example
            assert type(store).__name__ == "PostgresStore"
            conninfo, options = split_options(url)
            if "schema=" in url:
                assert options.schema == "team_a"
            if "migration_timeout=" in url:
                assert options.migration_timeout == 30
            if "sslmode=" in url:  # passed on to libpq, planfence's own options taken out
                assert "sslmode=require" in conninfo and "application_name=gate" in conninfo
                assert "schema" not in conninfo
            continue
        with open_store(url) as store:  # opens: set up, one write and one read
            store.own(f"k{n}", "a")
            assert store.owner(f"k{n}") == "a"


def test_every_url_that_the_page_says_is_refused_is_refused_with_its_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    from planfence.shared_memory import create_async_store

    rows = table(URLS, "Examples", 1)
    assert len(rows) >= 6
    for url_cell, error in rows:
        url = code(url_cell)
        if url.startswith("postgresql://"):
            pytest.importorskip("psycopg")
        with pytest.raises(ConfigError) as refused:
            create_async_store(url)
        assert str(refused.value) == error, url
        assert "hunter22" not in str(refused.value)


def test_a_missing_store_with_create_0_is_refused_as_the_page_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with (
        pytest.raises(StoreNotFoundError) as missing,
        open_store("sqlite:///nowhere/m.db?create=0"),
    ):
        pass
    shown = block(URLS, "A store that does not exist yet", "text").strip()
    expected = re.sub(r"^no store at \S+", f"no store at {tmp_path / 'nowhere' / 'm.db'}", shown)
    assert str(missing.value) == expected


def test_sqlite_options_table_is_what_the_backend_accepts(tmp_path: Path) -> None:
    from planfence.shared_memory.backends.sqlite_files import sqlite_options_from_url

    rows = table(URLS, "SQLite")
    assert {code(r[0]) for r in rows} == {"synchronous", "create", "io"}
    for value in ("off", "normal", "full", "extra"):
        sqlite_options_from_url(f"sqlite:///x.db?synchronous={value}")
    for n, value in enumerate(("1", "true", "yes", "on")):
        with open_store(f"sqlite:///{tmp_path}/{n}.db?create={value}&io=loop") as store:
            store.own("k", "a")
    for n, value in enumerate(("0", "false", "no", "off")):
        with (
            pytest.raises(StoreNotFoundError),
            open_store(f"sqlite:///{tmp_path}/x{n}.db?create={value}") as store,
        ):
            store.keys()
    with pytest.raises(ConfigError):
        sqlite_options_from_url("sqlite:///x.db?mode=ro")


def test_postgres_options_table_is_what_the_backend_reads() -> None:
    pytest.importorskip("psycopg")
    from planfence.shared_memory.backends.postgres_conn import OWN_OPTIONS

    rows = table(URLS, "PostgreSQL")
    assert {code(r[0]) for r in rows} == set(OWN_OPTIONS)


# ---- wire.md


def test_meta_keys_are_the_code_s() -> None:
    from planfence.adapters.mcp import meta

    keys = {code(r[0]) for r in table(WIRE, "`_meta` keys")}
    constants = {v for k, v in vars(meta).items() if k.startswith("META_")}
    assert keys == constants
    request = json.loads(block(WIRE, "`_meta` keys", "json"))
    assert set(request["params"]["_meta"]) <= keys


def test_reason_codes_are_every_code_with_its_verdict() -> None:
    from planfence.adapters.mcp.meta import AGENT_MISMATCH, MALFORMED_META
    from planfence.plugins.gate.verdicts import BLOCK_REASONS, Reason

    rows = {code(r[0]): r[1] for r in table(WIRE, "Reason codes")}
    assert set(rows) == {r.value for r in Reason} | {MALFORMED_META, AGENT_MISMATCH}
    for reason, verdict in rows.items():
        if reason in ("current", "ungated"):
            assert verdict == "allow"
        elif reason in BLOCK_REASONS or reason in (MALFORMED_META, AGENT_MISMATCH):
            assert verdict == "block", reason
        else:
            assert verdict == "replan", reason


def test_payload_examples_validate_against_the_wire_models() -> None:
    from planfence.plugins.gate import AllowPayload, RefusalPayload, parse_payload

    allow = parse_payload(json.loads(block(WIRE, "An allow's decision", "json")))
    assert isinstance(allow, AllowPayload)
    assert {code(r[0]) for r in table(WIRE, "An allow's decision")} == set(allow.wire())
    refusal = parse_payload(json.loads(block(WIRE, "A refusal", "json"))["planfence"])
    assert isinstance(refusal, RefusalPayload) and refusal.stale_keys == ("order/7",)
    fields = {f.strip("`") for r in table(WIRE, "A refusal") for f in r[0].split(", ")}
    assert fields == set(refusal.wire())
    failure = json.loads(block(WIRE, "A failure after an allow", "json"))["planfence"]
    assert set(failure) == {"error", "tool", "message", "decision"}
    assert isinstance(parse_payload(failure["decision"]), AllowPayload)


def test_refusal_example_is_the_shape_the_proxy_sends() -> None:
    pytest.importorskip("mcp")
    from planfence.adapters.mcp.results import to_wire_result
    from planfence.plugins.gate import RefusalPayload

    shown = json.loads(block(WIRE, "A refusal", "json"))
    result = to_wire_result(RefusalPayload.model_validate(shown["planfence"]))
    assert result["isError"] is True
    assert json.loads(result["content"][0]["text"]) == shown
    assert result["_meta"]["dev.planfence/refusal"] == shown


def test_failure_codes_are_the_proxy_s() -> None:
    pytest.importorskip("mcp")
    from planfence.adapters.mcp import results, upstream

    text = (REPO / WIRE).read_text(encoding="utf-8")
    line = re.search(r"`error` is (.+?);", text, re.S)
    assert line
    named = set(re.findall(r"`(\w+)`", line.group(1)))
    assert named == {
        upstream.UPSTREAM_TIMEOUT,
        upstream.UPSTREAM_UNAVAILABLE,
        upstream.UPSTREAM_ERROR,
        results.INPUT_REFUSED,
        results.PROXY_ERROR,
    }


def test_fence_token_example_parses() -> None:
    from planfence.plugins.gate.fence import FenceToken

    token = FenceToken.parse(json.loads(block(WIRE, "The fencing token", "json")))
    assert not token.signed and token.heads["order/7"].epoch == 1
    assert {f.strip("`") for r in table(WIRE, "The fencing token") for f in r[0].split(", ")} == (
        set(FenceToken.model_fields)
    )


def test_owner_service_examples_validate_against_its_models() -> None:
    pytest.importorskip("starlette")
    from planfence.adapters.owner_service.wire import HeadsAnswer, HeadsRequest

    request = HeadsRequest.model_validate(json.loads(block(WIRE, "Owner services", "json", 0)))
    answer = HeadsAnswer.model_validate(json.loads(block(WIRE, "Owner services", "json", 1)))
    assert answer.nonce == request.nonce
    names = {f.strip("`") for r in table(WIRE, "Owner services") for f in r[0].split(", ")}
    assert names == set(HeadsRequest.model_fields) | set(HeadsAnswer.model_fields)
    assert [b.lang for b in page_blocks(WIRE) if b.heading == "Owner services"] == [
        "text",
        "json",
        "json",
    ]
