"""`JwtVerifier` on its own: the JWKS found through the issuer's metadata (RFC 8414), a key the
issuer rotates in is fetched on first sight of its `kid`, and a JWKS that cannot be read stops
the proxy from starting."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from test_mcp_oauth import AUDIENCE, ISSUER, Issuer

from planfence.adapters.mcp.oauth import JwtVerifier, OAuthConfigError, ResourceServer

RESOURCE = "http://127.0.0.1:8808/mcp"


class FakeIssuer:
    """The authorization server's metadata and JWKS over HTTP (an httpx mock transport)."""

    def __init__(self, *issuers: Issuer) -> None:
        self.keys = list(issuers)
        self.fetches: list[str] = []

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.fetches.append(request.url.path)
        if request.url.path == "/.well-known/oauth-authorization-server":
            return httpx.Response(200, json={"issuer": ISSUER, "jwks_uri": f"{ISSUER}/jwks"})
        if request.url.path == "/jwks":
            keys: list[Any] = [k for i in self.keys for k in i.jwks()["keys"]]
            return httpx.Response(200, json={"keys": keys})
        return httpx.Response(404)

    def verifier(self, **overrides: Any) -> JwtVerifier:
        server = ResourceServer(ISSUER, AUDIENCE, RESOURCE, **overrides)
        return JwtVerifier(
            server, client=httpx.AsyncClient(transport=httpx.MockTransport(self.handler))
        )


async def test_the_jwks_is_discovered_and_a_rotated_key_is_fetched() -> None:
    first, second = Issuer("k1"), Issuer("k2")
    fake = FakeIssuer(first)
    verifier = fake.verifier()
    await verifier.load()
    assert fake.fetches == ["/.well-known/oauth-authorization-server", "/jwks"]
    token = await verifier.verify_token(first.token("executor", scope="tools:call"))
    assert token is not None and token.subject == "executor"
    assert token.scopes == ["tools:call"] and (token.claims or {})["planfence_agent"] == "executor"
    assert await verifier.verify_token(second.token()) is None  # not published yet
    fake.keys.append(second)
    verifier._loaded_at -= 2  # more than a second since the last fetch
    assert await verifier.verify_token(second.token("planner")) is not None
    assert fake.fetches.count("/jwks") == 2  # the unknown kid right after loading: no fetch


async def test_the_agent_claim_is_configurable() -> None:
    issuer = Issuer()
    verifier = FakeIssuer(issuer).verifier(agent_claim="agent")
    assert await verifier.verify_token(issuer.token("executor")) is None  # no "agent" claim
    token = await verifier.verify_token(issuer.token("u-1", agent="night-shift"))
    assert token is not None and (token.claims or {})["planfence_agent"] == "night-shift"


async def test_an_unreadable_jwks_is_a_config_error(tmp_path: Any) -> None:
    fake = FakeIssuer()
    with pytest.raises(OAuthConfigError, match="no public signing key"):
        await fake.verifier().load()
    bad = tmp_path / "jwks.json"
    bad.write_text(json.dumps({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "h"}]}))
    with pytest.raises(OAuthConfigError, match="no public signing key"):
        await fake.verifier(jwks=str(bad)).load()  # a shared secret is never a verification key
    bad.write_text("{")
    with pytest.raises(OAuthConfigError, match="invalid JSON"):
        await fake.verifier(jwks=str(bad)).load()


@pytest.mark.parametrize("refresh", [60.0, 3600.0])
async def test_a_withdrawn_key_is_accepted_until_the_jwks_is_read_again(refresh: float) -> None:
    """The issuer withdraws a key: tokens it signed still pass while the JWKS read last is
    younger than `jwks_refresh_s`, and fail from the first check after that."""
    old, new = Issuer("old"), Issuer("new")
    fake = FakeIssuer(old, new)
    verifier = fake.verifier(jwks_refresh_s=refresh)
    await verifier.load()
    fake.keys.remove(old)  # withdrawn at the issuer
    verifier._loaded_at -= refresh - 5  # 5 s short of the interval: the JWKS in hand is used
    assert await verifier.verify_token(old.token()) is not None
    assert fake.fetches.count("/jwks") == 1
    verifier._loaded_at -= 10  # past it: the next check reads the JWKS again
    assert await verifier.verify_token(old.token()) is None
    assert await verifier.verify_token(new.token()) is not None
    assert fake.fetches.count("/jwks") == 2


def test_the_refresh_interval_is_an_option() -> None:
    from planfence.adapters.cli.main import build_parser
    from planfence.adapters.mcp.oauth import JWKS_REFRESH_S
    from planfence.adapters.mcp.oauth_cli import auth_options

    base = ["proxy", "--policy", "p.toml", "--transport", "http"]
    base += ["--auth-issuer", ISSUER, "--auth-audience", AUDIENCE, "--auth-jwks", ISSUER + "/j"]
    for extra, expected in (([], JWKS_REFRESH_S), (["--auth-jwks-refresh", "30"], 30.0)):
        argv = [*base, *extra, "--", "true"]
        server = auth_options(build_parser(argv).parse_args(argv))["resource_server"]
        assert server is not None and server.jwks_refresh_s == expected
    for bad in ("0", "-1", "inf", "soon"):
        argv = [*base, "--auth-jwks-refresh", bad, "--", "true"]
        with pytest.raises(SystemExit):
            build_parser(argv).parse_args(argv)
    with pytest.raises(OAuthConfigError, match="positive number of seconds"):
        ResourceServer(ISSUER, AUDIENCE, RESOURCE, jwks_refresh_s=0)


def test_the_docs_say_where_the_keys_come_from_and_for_how_long() -> None:
    from pathlib import Path

    from planfence.adapters.mcp.oauth import DISCOVERY, JWKS_REFRESH_S

    page = Path(__file__).resolve().parents[2] / "docs" / "frameworks" / "mcp.md"
    said = " ".join(page.read_text(encoding="utf-8").split())
    first, then = (f"`ISSUER{path}`" for path in DISCOVERY)
    assert f"looked up at {first} (RFC 8414), then at {then}" in said
    assert "The proxy reads the JWKS when it starts, and refuses to start" in said
    assert f"`--auth-jwks-refresh SECONDS` (default {JWKS_REFRESH_S:g};" in said
    assert "a key the issuer withdraws is still accepted for up to that long" in said
