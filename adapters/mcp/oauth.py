"""The HTTP proxy as an OAuth 2.1 resource server (the MCP authorization specification).

With `--auth-issuer URL --auth-audience AUD`, every request to `/mcp` must carry an access token
that this module validates as a JWT (RFC 9068 profile), with the MCP SDK's own resource-server
pieces around it:

- the SDK's `BearerAuthBackend` and `RequireAuthMiddleware` answer a request without a valid
  token with 401 and `WWW-Authenticate: Bearer error="invalid_token", ..., resource_metadata="…"`
  naming this server's protected resource metadata (RFC 9728), which the SDK's route serves at
  `/.well-known/oauth-protected-resource/mcp`; the same document is served at
  `/.well-known/oauth-protected-resource` for clients that look at the root;
- `JwtVerifier` (a `mcp.server.auth.provider.TokenVerifier`) checks the token with PyJWT: the
  signature against the issuer's JWKS (`--auth-jwks FILE|URL`, by default the `jwks_uri` of the
  issuer's metadata, looked up at `DISCOVERY`), read when the proxy starts (no JWKS, no proxy)
  and again once `jwks_refresh_s` have passed (`--auth-jwks-refresh`; a key the issuer withdrew
  is accepted until then), with the key the token's `kid` names and only that key's algorithm
  (`alg: none`, HMAC with a public key and any other algorithm swap are refused), `iss`, `aud`,
  `exp` (required) and `nbf`;
- the calling agent is the token's `--agent-claim` (default `sub`): a call whose `_meta` names
  another agent is refused (`agent_mismatch`), and one without names the token's.

The client's token stays in the proxy: the upstream is reached over its own connection (stdio,
or HTTP with the proxy's own headers), never with the client's `Authorization`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import jwt
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import build_resource_metadata_url
from mcp.server.auth.settings import AuthSettings
from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import AnyHttpUrl
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from planfence.shared_memory import ConfigError, InvalidKeyError
from planfence.shared_memory.records import validate_agent

from .meta import AGENT_MISMATCH as AGENT_MISMATCH  # a token naming another agent

logger = logging.getLogger("planfence.mcp")

WELL_KNOWN = "/.well-known/oauth-protected-resource"
ASYMMETRIC = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
"""The algorithms a token may be signed with: public-key ones only (never `none`, never HMAC,
which would turn a published public key into a shared secret)."""
DISCOVERY = ("/.well-known/oauth-authorization-server", "/.well-known/openid-configuration")
"""Where an issuer's metadata (with its `jwks_uri`) is looked up: RFC 8414, then OpenID."""
JWKS_REFRESH_S = 300.0
"""How long a fetched JWKS is used before it is read again (a withdrawn key works that long)."""
LEEWAY_S = 0


class OAuthConfigError(ConfigError):
    """Resource-server settings that cannot work (a JWKS that cannot be read, a bad URL)."""


@dataclass(frozen=True)
class ResourceServer:
    """What the proxy needs to be a resource server.

    Args:
        issuer: the authorization server's issuer identifier (`iss`, exactly).
        audience: the audience tokens must be issued for (`aud`).
        resource: this server's URL, advertised in the protected resource metadata.
        jwks: a JWKS file path or URL (None: the issuer metadata's `jwks_uri`).
        agent_claim: the claim that names the calling agent.
        scopes: scopes every token must carry (none by default).
        jwks_refresh_s: seconds a fetched JWKS is used before it is read again, so the
            longest a key the issuer withdrew is still accepted (a `kid` not seen before is
            looked up at once, at most once a second).
    """

    issuer: str
    audience: str
    resource: str
    jwks: str | None = None
    agent_claim: str = "sub"
    scopes: tuple[str, ...] = ()
    jwks_refresh_s: float = JWKS_REFRESH_S

    def __post_init__(self) -> None:
        if not self.jwks_refresh_s > 0 or self.jwks_refresh_s == float("inf"):
            raise OAuthConfigError(
                f"the JWKS refresh interval must be a positive number of seconds, not "
                f"{self.jwks_refresh_s!r}"
            )

    def settings(self) -> AuthSettings:
        # From strings, so the models keep a path-less issuer as it is (no trailing slash:
        # clients compare issuer identifiers exactly).
        return AuthSettings.model_validate(
            {
                "issuer_url": self.issuer,
                "resource_server_url": self.resource,
                "required_scopes": list(self.scopes) or None,
                "validate_token_resource": False,  # `aud` is checked by the verifier
            }
        )

    def metadata_url(self) -> str:
        return str(build_resource_metadata_url(AnyHttpUrl(self.resource)))

    def root_metadata_route(self) -> Route:
        """The protected resource metadata at the root well-known path too."""
        metadata = ProtectedResourceMetadata.model_validate(
            {
                "resource": self.resource,
                "authorization_servers": [self.issuer],
                "scopes_supported": list(self.scopes) or None,
            }
        )
        body = metadata.model_dump(mode="json", exclude_none=True)

        async def handle(request: Request) -> Response:
            return JSONResponse(body, headers={"Cache-Control": "public, max-age=3600"})

        return Route(WELL_KNOWN, endpoint=handle, methods=["GET"])


class JwtVerifier:
    """Validates JWT access tokens for one issuer and audience (an MCP SDK `TokenVerifier`)."""

    def __init__(self, server: ResourceServer, *, client: httpx.AsyncClient | None = None) -> None:
        self.server = server
        self._client = client
        self._keys: dict[str, jwt.PyJWK] = {}
        self._anonymous: jwt.PyJWK | None = None
        self._loaded_at = 0.0
        self._jwks_url: str | None = None
        self._lock = anyio.Lock()

    async def load(self) -> None:
        """Read the JWKS now (raises `OAuthConfigError` when it cannot be read)."""
        await self._refresh(force=True)

    async def verify_token(self, token: str) -> AccessToken | None:
        """The token's claims as an `AccessToken`, or None (the request gets 401)."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            return None
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in ASYMMETRIC:
            logger.info("refused an access token signed with %r", alg)
            return None
        key = await self._key(kid if isinstance(kid, str) else None)
        if key is None or key.algorithm_name != alg:
            logger.info("refused an access token: no key %r for %s", kid, alg)
            return None
        try:
            claims = jwt.decode(
                token,
                key=key,
                algorithms=[key.algorithm_name],
                audience=self.server.audience,
                issuer=self.server.issuer,
                leeway=LEEWAY_S,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWTError as exc:
            logger.info("refused an access token: %s", exc)
            return None
        agent = claims.get(self.server.agent_claim)
        try:
            validate_agent(agent)
        except (InvalidKeyError, TypeError):
            logger.info(
                "refused an access token: its %r is not an agent id", self.server.agent_claim
            )
            return None
        scope = claims.get("scope")
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id") or claims.get("azp") or agent),
            scopes=scope.split() if isinstance(scope, str) else [],
            expires_at=int(claims["exp"]),
            subject=str(claims["sub"]) if "sub" in claims else None,
            claims={**claims, "planfence_agent": agent},
        )

    async def _key(self, kid: str | None) -> jwt.PyJWK | None:
        await self._refresh(force=False)
        if kid is None:
            return self._anonymous
        if kid not in self._keys:
            await self._refresh(force=True, quiet=True)  # a key the issuer just rotated in
        return self._keys.get(kid)

    async def _refresh(self, *, force: bool, quiet: bool = False) -> None:
        async with self._lock:
            fresh = time.monotonic() - self._loaded_at < self.server.jwks_refresh_s
            if self._loaded_at and (fresh and not force):
                return
            if self._loaded_at and force and time.monotonic() - self._loaded_at < 1.0:
                return  # an unknown kid does not fetch the JWKS more than once a second
            try:
                data = await self._read_jwks()
                keys, anonymous = _parse_jwks(data)
            except OAuthConfigError:
                if quiet or self._loaded_at:
                    logger.warning("could not refresh the JWKS; keeping the keys known")
                    self._loaded_at = time.monotonic()
                    return
                raise
            self._keys, self._anonymous = keys, anonymous
            self._loaded_at = time.monotonic()

    async def _read_jwks(self) -> Any:
        source = self.server.jwks
        if source is not None and not source.startswith(("http://", "https://")):
            try:
                return json.loads(await anyio.Path(source).read_text(encoding="utf-8"))
            except OSError as exc:
                raise OAuthConfigError(
                    f"cannot read --auth-jwks {source}: {exc.strerror}"
                ) from None
            except json.JSONDecodeError as exc:
                raise OAuthConfigError(f"--auth-jwks {source}: invalid JSON: {exc.msg}") from None
        url = source or self._jwks_url or await self._discover()
        self._jwks_url = url
        return await self._get_json(url)

    async def _discover(self) -> str:
        base = self.server.issuer.rstrip("/")
        failures = []
        for path in DISCOVERY:
            try:
                meta = await self._get_json(base + path)
            except OAuthConfigError as exc:
                failures.append(str(exc))
                continue
            if isinstance(meta, Mapping) and isinstance(meta.get("jwks_uri"), str):
                return str(meta["jwks_uri"])
        if len(failures) == len(DISCOVERY):  # neither document could be read: say why
            raise OAuthConfigError(
                f"no metadata from the issuer {self.server.issuer} ({'; '.join(failures)}); "
                "give --auth-jwks FILE|URL"
            )
        raise OAuthConfigError(
            f"the issuer {self.server.issuer} publishes no jwks_uri; give --auth-jwks FILE|URL"
        )

    async def _get_json(self, url: str) -> Any:
        client = self._client or httpx.AsyncClient(timeout=10.0)
        try:
            response = await client.get(url, headers={"accept": "application/json"})
            response.raise_for_status()
            return response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise OAuthConfigError(f"cannot read {url}: {exc}") from None
        finally:
            if self._client is None:
                await client.aclose()


def _parse_jwks(data: Any) -> tuple[dict[str, jwt.PyJWK], jwt.PyJWK | None]:
    if not isinstance(data, Mapping) or not isinstance(data.get("keys"), list):
        raise OAuthConfigError('a JWKS is a JSON object with a "keys" list')
    keys: dict[str, jwt.PyJWK] = {}
    usable: list[jwt.PyJWK] = []
    for jwk in data["keys"]:
        if not isinstance(jwk, Mapping) or jwk.get("use", "sig") != "sig":
            continue
        try:
            key = jwt.PyJWK(dict(jwk))
        except jwt.PyJWTError:
            continue  # a key type this proxy cannot use
        if key.algorithm_name not in ASYMMETRIC:
            continue  # a symmetric key in a published set is never a verification key
        usable.append(key)
        if isinstance(jwk.get("kid"), str):
            keys[str(jwk["kid"])] = key
    if not usable:
        raise OAuthConfigError("the JWKS holds no public signing key this proxy can use")
    return keys, usable[0] if len(usable) == 1 else None


def protect(app: Any, server: ResourceServer, verifier: JwtVerifier) -> Any:
    """`app` (the proxy's HTTP front) behind the SDK's resource-server pieces: the bearer token
    checked by `verifier`, 401 with the metadata's URL without one, and the protected resource
    metadata served at both well-known paths."""
    from mcp.server.auth.middleware.bearer_auth import BearerAuthBackend, RequireAuthMiddleware
    from mcp.server.auth.routes import create_protected_resource_routes
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.authentication import AuthenticationMiddleware

    settings = server.settings()
    assert settings.resource_server_url is not None
    scopes, metadata = list(server.scopes), server.metadata_url()
    routes = [
        Route("/mcp", endpoint=RequireAuthMiddleware(app, scopes, AnyHttpUrl(metadata))),
        *create_protected_resource_routes(
            resource_url=settings.resource_server_url,
            authorization_servers=[settings.issuer_url],
            scopes_supported=settings.required_scopes,
        ),
        server.root_metadata_route(),
    ]
    backend = BearerAuthBackend(verifier)
    return Starlette(
        routes=routes, middleware=[Middleware(AuthenticationMiddleware, backend=backend)]
    )


def token_agent(request: object) -> str | None:
    """The agent the request's validated access token names (None: no token auth)."""
    return scope_agent(getattr(request, "scope", None))


def scope_agent(scope: object) -> str | None:
    """The agent the validated access token of an ASGI request `scope` names."""
    user = scope.get("user") if isinstance(scope, Mapping) else None
    if not isinstance(user, AuthenticatedUser):
        return None
    agent = (user.access_token.claims or {}).get("planfence_agent")
    return agent if isinstance(agent, str) else None


def resource_server(
    issuer: str | None,
    audience: str | None,
    jwks: str | None,
    agent_claim: str,
    resource: str,
    jwks_refresh_s: float = JWKS_REFRESH_S,
) -> ResourceServer | None:
    """The resource-server settings from the command line (None: not configured)."""
    if issuer is None and audience is None and jwks is None:
        return None
    if issuer is None or audience is None:
        raise OAuthConfigError("--auth-issuer and --auth-audience go together")
    if not issuer.startswith(("https://", "http://")):
        raise OAuthConfigError(f"--auth-issuer {issuer!r} is not an http(s) URL")
    if (
        jwks is not None
        and not jwks.startswith(("http://", "https://"))
        and not Path(jwks).is_file()
    ):
        raise OAuthConfigError(f"--auth-jwks {jwks}: no such file")
    if not agent_claim:
        raise OAuthConfigError("--agent-claim names a claim")
    return ResourceServer(
        issuer, audience, resource, jwks, agent_claim, jwks_refresh_s=jwks_refresh_s
    )
