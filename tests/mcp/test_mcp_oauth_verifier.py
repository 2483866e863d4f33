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
