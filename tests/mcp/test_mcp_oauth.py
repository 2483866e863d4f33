"""`planfence proxy --transport http --auth-issuer ... --auth-audience ...`: an OAuth 2.1
resource server. Tokens made here (ES256, a JWKS file) go through real HTTP requests, the
official Python client and the official TypeScript client: only a valid token for this issuer
and audience gets in, the calling agent is the token's, `_meta` naming another agent is refused
(`agent_mismatch`), a policy may reserve a tool to some agents, and the client's token never
reaches the upstream."""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_helpers import (
    HERE,
    POLICY,
    World,
    background,
    free_port,
    plan_meta,
    refusal,
    wait_for_port,
)
from ts_harness import install, run_client

from planfence.plugins.gate import find_decisions

ISSUER = "https://auth.example.test"
AUDIENCE = "planfence-proxy"
ARGS = {"destination": "Lisbon", "trip": "t1"}
RESTRICTED = '\n[tools.ship]\ndepends_on = ["trip/t1/requirements"]\nagents = ["executor"]\n'
SHIP = {"order_id": "o1"}


class Issuer:
    """An authorization server's signing key and its JWKS; makes access tokens."""

    def __init__(self, kid: str = "k1") -> None:
        self.kid = kid
        self.key = ec.generate_private_key(ec.SECP256R1())

    def jwks(self) -> dict[str, Any]:
        jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.key.public_key()))
        return {"keys": [{**jwk, "kid": self.kid, "use": "sig", "alg": "ES256"}]}

    def token(self, agent: str = "executor", /, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": AUDIENCE, "sub": agent, "iat": now, "exp": now + 300}
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, self.key, algorithm="ES256", headers={"kid": self.kid})


def unsigned(agent: str = "executor") -> str:
    """`alg: none`: the claims of a valid token, no signature."""

    def b64(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": agent, "exp": now + 300}
    return f"{b64({'alg': 'none', 'typ': 'JWT', 'kid': 'k1'})}.{b64(claims)}."


def hmac_with_public_key(issuer: Issuer) -> str:
    """Algorithm confusion: HS256 keyed with the issuer's published public key."""
    pem = issuer.key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    now = int(time.time())
    claims = {"iss": ISSUER, "aud": AUDIENCE, "sub": "executor", "exp": now + 300}
    header = {"alg": "HS256", "kid": "k1", "typ": "JWT"}
    signing = ".".join(
        base64.urlsafe_b64encode(json.dumps(p).encode()).rstrip(b"=").decode()
        for p in (header, claims)
    )
    import hashlib
    import hmac

    mac = hmac.new(pem, signing.encode(), hashlib.sha256).digest()
    return f"{signing}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


def forged_tokens(issuer: Issuer) -> dict[str, str]:
    """Every credential that must be refused, by what is wrong with it."""
    now = int(time.time())
    return {
        "expired": issuer.token(exp=now - 60, iat=now - 400),
        "not yet valid": issuer.token(nbf=now + 3600),
        "no expiry": issuer.token(exp=None),
        "wrong audience": issuer.token(aud="another-service"),
        "wrong issuer": issuer.token(iss="https://evil.example.test"),
        "wrong key": Issuer(kid="k1").token(),
        "unknown kid": Issuer(kid="k9").token(),
        "alg none": unsigned(),
        "hs256 with the public key": hmac_with_public_key(issuer),
        "not an agent id": issuer.token("not/an agent"),
        "garbage": "not-a-jwt",
    }


@pytest.fixture
def issuer() -> Issuer:
    return Issuer()


@asynccontextmanager
async def oauth_proxy(
    world: World, tmp_path: Path, issuer: Issuer, *options: str, upstream: list[str] | None = None
) -> AsyncIterator[str]:
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(issuer.jwks()))
    world.policy.write_text(POLICY + RESTRICTED)
    port = free_port()
    args = world.proxy_args(
        "--transport", "http", "--port", str(port),
        "--auth-issuer", ISSUER, "--auth-audience", AUDIENCE, "--auth-jwks", str(jwks),
        *options,
        upstream=upstream if upstream is not None else world.upstream_command(),
    )  # fmt: skip
    async with background([sys.executable, *args], tmp_path / "proxy.log"):
        await wait_for_port(port)
        yield f"http://127.0.0.1:{port}"


@asynccontextmanager
async def client_with(url: str, token: str | None) -> AsyncIterator[Client]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode="legacy", read_timeout_seconds=60) as client:
            yield client


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "oauth-test", "version": "1"},
    },
}


async def post(base: str, token: str | None) -> httpx.Response:
    headers = {"accept": "application/json, text/event-stream"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    async with httpx.AsyncClient() as http:
        return await http.post(f"{base}/mcp", json=INITIALIZE, headers=headers, timeout=30)


async def test_metadata_401_and_every_forged_token(
    world: World, tmp_path: Path, issuer: Issuer
) -> None:
    async with oauth_proxy(world, tmp_path, issuer) as base:
        async with httpx.AsyncClient() as http:
            for path in ("/.well-known/oauth-protected-resource/mcp",
                         "/.well-known/oauth-protected-resource"):  # fmt: skip
                meta = (await http.get(base + path)).json()
                assert meta["resource"] == f"{base}/mcp"
                assert meta["authorization_servers"] == [ISSUER]
                assert meta["bearer_methods_supported"] == ["header"]
        missing = await post(base, None)
        assert missing.status_code == 401
        challenge = missing.headers["www-authenticate"]
        assert challenge.startswith("Bearer ")
        assert f'resource_metadata="{base}/.well-known/oauth-protected-resource/mcp"' in challenge
        for what, token in forged_tokens(issuer).items():
            refused = await post(base, token)
            assert refused.status_code == 401, what
            assert 'error="invalid_token"' in refused.headers["www-authenticate"], what
        ok = await post(base, issuer.token())
        assert ok.status_code == 200 and "planfence" in ok.text


async def test_the_agent_is_the_tokens_through_the_python_client(
    world: World, tmp_path: Path, issuer: Issuer
) -> None:
    async with oauth_proxy(world, tmp_path, issuer) as base:
        url = f"{base}/mcp"
        async with client_with(url, issuer.token("executor")) as client:
            ok = await client.call_tool("book", ARGS, meta=plan_meta(world.plan))
            assert ok.is_error is False, ok
            same = plan_meta(world.plan, **{"dev.planfence/agent": "executor"})
            assert (await client.call_tool("book", ARGS, meta=same)).is_error is False
            other = plan_meta(world.plan, **{"dev.planfence/agent": "planner"})
            body = refusal(await client.call_tool("book", ARGS, meta=other))
            assert (body["verdict"], body["reason"]) == ("block", "agent_mismatch")
            shipped = await client.call_tool("ship", SHIP, meta=plan_meta(world.plan))
            assert shipped.is_error is False  # reserved to the executor, who this is
        async with client_with(url, issuer.token("planner")) as client:
            body = refusal(await client.call_tool("ship", SHIP, meta=plan_meta(world.plan)))
            assert (body["verdict"], body["reason"]) == ("block", "agent_not_allowed")
            # Naming the executor in _meta does not help: the token says planner.
            as_executor = plan_meta(world.plan, **{"dev.planfence/agent": "executor"})
            body = refusal(await client.call_tool("ship", SHIP, meta=as_executor))
            assert body["reason"] == "agent_mismatch"
        # The Python client reports the 401 as an error response: it never gets a session.
        for what, token in forged_tokens(issuer).items():
            listed = None
            with pytest.raises(Exception) as caught:  # noqa: PT011  (the SDK's own error)
                async with client_with(url, token) as client:
                    listed = await client.list_tools()
            assert listed is None and "MCPError" in repr(caught.value), what
    decisions = await find_decisions(world.store, source=None)
    mine = [d for d in decisions if d.tool in ("book", "ship")]
    assert [d.verdict for d in mine].count("allow") == 3
    assert {d.reason for d in mine if d.verdict == "block"} == {
        "agent_mismatch",
        "agent_not_allowed",
    }


async def test_the_clients_token_never_reaches_the_upstream(
    world: World, tmp_path: Path, issuer: Issuer
) -> None:
    up_port, seen = free_port(), tmp_path / "headers.jsonl"
    command = [sys.executable, str(HERE / "header_upstream.py"), "--effects", str(world.effects)]
    command += ["--headers", str(seen), "--port", str(up_port)]
    async with background(command, tmp_path / "upstream.log"):
        await wait_for_port(up_port)
        upstream = f"http://127.0.0.1:{up_port}/mcp"
        token = issuer.token("executor")
        async with (
            oauth_proxy(world, tmp_path, issuer, "--upstream-url", upstream, upstream=[]) as base,
            client_with(f"{base}/mcp", token) as client,
        ):
            ok = await client.call_tool("book", ARGS, meta=plan_meta(world.plan))
            assert ok.is_error is False
    requests = [json.loads(line) for line in seen.read_text().splitlines()]
    assert requests and all("authorization" not in h for h in requests)
    assert all(token not in json.dumps(h) for h in requests)
    assert [e["destination"] for e in world.effects_log("book")] == ["Lisbon"]


async def test_the_typescript_client_over_http(
    world: World, tmp_path: Path, issuer: Issuer
) -> None:
    node = install()
    now = int(time.time())
    async with oauth_proxy(world, tmp_path, issuer) as base:
        target = {"transport": "http", "url": f"{base}/mcp"}
        calls = [
            {"name": "book", "arguments": ARGS, "meta": plan_meta(world.plan)},
            {
                "name": "book",
                "arguments": ARGS,
                "meta": plan_meta(world.plan, **{"dev.planfence/agent": "planner"}),
            },
            {"name": "ship", "arguments": SHIP, "meta": plan_meta(world.plan)},
        ]
        bearer = {"authorization": f"Bearer {issuer.token('executor')}"}
        report = await run_client(node, {**target, "headers": bearer, "calls": calls})
        ok, mismatch, shipped = (r["result"] for r in report["results"])
        assert ok["isError"] is False and shipped["isError"] is False
        body = mismatch["_meta"]["dev.planfence/refusal"]["planfence"]
        assert (body["verdict"], body["reason"]) == ("block", "agent_mismatch")
        as_planner = {"authorization": f"Bearer {issuer.token('planner')}"}
        report = await run_client(node, {**target, "headers": as_planner, "calls": calls[2:]})
        [refused] = (r["result"] for r in report["results"])
        assert refused["_meta"]["dev.planfence/refusal"]["planfence"]["reason"] == (
            "agent_not_allowed"
        )
        for what, token in {
            "expired": issuer.token(exp=now - 60, iat=now - 400),
            "wrong audience": issuer.token(aud="another-service"),
            "alg none": unsigned(),
            "wrong key": Issuer().token(),
        }.items():
            headers = {"authorization": f"Bearer {token}"}
            report = await run_client(node, {**target, "headers": headers, "calls": calls[:1]})
            assert report["connectError"]["code"] == 401, (what, report)
            assert "invalid_token" in report["connectError"]["message"], (what, report)
        report = await run_client(node, {**target, "calls": calls[:1]})  # no token at all
        assert report["connectError"]["code"] == 401


async def test_bad_settings_are_one_error_line(world: World, tmp_path: Path) -> None:
    cases = [
        (["--transport", "http", "--auth-issuer", ISSUER], "go together"),
        (["--auth-issuer", ISSUER, "--auth-audience", AUDIENCE, "--auth-jwks", "x"], "no such"),
        (
            ["--transport", "http", "--auth-issuer", "ftp://x", "--auth-audience", AUDIENCE],
            "not an http(s) URL",
        ),
    ]
    for options, says in cases:
        command = [sys.executable, *world.proxy_args(*options, upstream=["true"])]
        with anyio.fail_after(60):
            done = await anyio.run_process(command, check=False)
        err = done.stderr.decode()
        assert done.returncode in (1, 2) and err.startswith("planfence: error: "), err
        assert err.count("\n") == 1 and says in err, err


async def test_without_the_issuers_keys_the_proxy_does_not_start(world: World) -> None:
    """The JWKS is read at start: an issuer that cannot be reached stops the proxy with one
    line naming both metadata documents it tried."""
    issuer = f"http://127.0.0.1:{free_port()}"
    options = ["--transport", "http", "--port", "0", "--auth-issuer", issuer]
    command = [sys.executable, *world.proxy_args(*options, "--auth-audience", AUDIENCE)]
    command += ["--", *world.upstream_command()]
    with anyio.fail_after(120):
        done = await anyio.run_process(command, check=False)
    err = done.stderr.decode().splitlines()[-1]
    assert done.returncode == 1
    assert err.startswith(f"planfence: error: no metadata from the issuer {issuer} (cannot read ")
    assert "/.well-known/oauth-authorization-server" in err
    assert "/.well-known/openid-configuration" in err and "--auth-jwks" in err


async def test_a_proxy_acting_for_an_agent_takes_only_that_agents_token(
    world: World, tmp_path: Path, issuer: Issuer
) -> None:
    async with oauth_proxy(world, tmp_path, issuer, "--agent", "executor") as base:
        url = f"{base}/mcp"
        async with client_with(url, issuer.token("executor")) as client:
            read = await client.call_tool("planfence_read", {"key": "trip/t1/requirements"})
            assert read.is_error is False, read
        async with client_with(url, issuer.token("planner")) as client:
            for tool, args in (
                ("planfence_read", {"key": "trip/t1/requirements"}),
                ("book", ARGS),
            ):
                body = refusal(await client.call_tool(tool, args))
                assert (body["verdict"], body["reason"]) == ("block", "agent_mismatch"), tool
