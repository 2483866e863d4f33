"""Who may talk to the proxy's HTTP front: an ASGI middleware in front of the MCP app.

- DNS rebinding (the MCP transport rules): a web page the user opens can make the browser send
  requests to a server on the user's machine, under the page's own name. Such requests carry the
  page's `Origin` and `Host`, so a request with an `Origin` that is not allowed is refused (403),
  and, while the proxy listens on loopback, so is one whose `Host` is not a loopback name (421).
  Requests without `Origin` (clients that are not browsers) pass this check.
- Bearer token (optional): every request must carry `Authorization: Bearer TOKEN`. The token is
  compared in constant time; a missing or wrong one gets 401 with no detail (nothing says which).

Allowed origins: the loopback ones (`http(s)://localhost`, `127.0.0.1`, `[::1]`, any port) and
the ones given with `--allow-origin`.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import Any
from urllib.parse import urlsplit

logger = logging.getLogger("planfence.mcp")

TOKEN_ENV = "PLANFENCE_PROXY_TOKEN"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or address, IPv6 with or without brackets) is this machine only."""
    name = host.strip("[]").lower()
    if name in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _hostname(authority: str) -> str:
    """The host part of a `Host` header value (`name:port`, `[v6]:port`)."""
    if authority.startswith("["):
        return authority[: authority.find("]") + 1] if "]" in authority else authority
    return authority.rsplit(":", 1)[0] if authority.count(":") == 1 else authority


def _normal_origin(origin: str) -> str:
    parts = urlsplit(origin.strip())
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    scheme = parts.scheme.lower()
    if port == _DEFAULT_PORTS.get(scheme):
        port = None
    return f"{scheme}://{host}" + (f":{port}" if port else "")


class HttpGuard:
    """The ASGI middleware: Origin and Host checks, then the bearer token if one is set.

    Args:
        app: the MCP ASGI app.
        token: the bearer token every request must carry (None: no token required).
        allowed_origins: origins allowed besides the loopback ones (`scheme://host[:port]`).
        check_host: refuse `Host` headers that are not loopback names (set when listening on
            loopback).
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        token: str | None = None,
        allowed_origins: Iterable[str] = (),
        check_host: bool = True,
    ) -> None:
        self.app = app
        self._token = _digest(token.encode()) if token else None
        self._origins = frozenset(_normal_origin(o) for o in allowed_origins)
        self._check_host = check_host

    def origin_allowed(self, origin: str) -> bool:
        normal = _normal_origin(origin)
        if normal in self._origins:
            return True
        parts = urlsplit(normal)
        return parts.scheme in ("http", "https") and is_loopback(parts.hostname or "")

    def _authorized(self, header: bytes | None) -> bool:
        assert self._token is not None
        scheme, _, given = (header or b"").partition(b" ")
        # Digests of equal length, compared in constant time: not even the token's length leaks.
        ok = hmac.compare_digest(_digest(given.strip()), self._token)
        return ok and scheme.lower() == b"bearer"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers: dict[bytes, bytes] = {}
        for name, value in scope.get("headers", []):
            headers.setdefault(name.lower(), value)
        origin = headers.get(b"origin")
        if origin is not None and not self.origin_allowed(origin.decode("latin-1")):
            logger.warning("refused a request from origin %r", origin.decode("latin-1"))
            await _answer(send, 403)
            return
        host = headers.get(b"host")
        if self._check_host and not is_loopback(_hostname((host or b"").decode("latin-1"))):
            await _answer(send, 421)
            return
        if self._token is not None and not self._authorized(headers.get(b"authorization")):
            await _answer(send, 401, [(b"www-authenticate", b"Bearer")])
            return
        await self.app(scope, receive, send)


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


async def _answer(
    send: Send, status: int, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    """An empty response: the status says all a caller is told."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-length", b"0"), *(headers or [])],
        }
    )
    await send({"type": "http.response.body", "body": b""})


def read_token(path: str | None, env: Mapping[str, str]) -> str | None:
    """The bearer token from `--auth-token-file` (first line) or `$PLANFENCE_PROXY_TOKEN`.

    Raises:
        ValueError: the file cannot be read or holds no token.
    """
    if path is not None:
        try:
            with open(path, encoding="utf-8") as f:
                token = f.readline().strip()
        except OSError as exc:
            raise ValueError(f"cannot read the auth token file {path}: {exc.strerror}") from None
        if not token:
            raise ValueError(f"the auth token file {path} is empty")
        return token
    return env.get(TOKEN_ENV, "").strip() or None


__all__ = ["TOKEN_ENV", "HttpGuard", "is_loopback", "read_token"]
