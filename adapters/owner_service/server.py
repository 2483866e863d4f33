"""The owner service: one agent answers, over HTTP, which version of each of its keys is current.

It reads heads from the shared store's owner table and signs what it says. It refuses requests
it cannot authenticate, requests meant for another owner, stale requests and replayed nonces.
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

from pydantic import ValidationError

from planfence.shared_memory import AsyncStore, InvalidKeyError, StoreError, create_async_store
from planfence.shared_memory.extras import extra_imports
from planfence.shared_memory.records import validate_agent, validate_key

from .keys import SigningKey, own_signer
from .wire import (
    DEFAULT_MAX_SKEW_S,
    ErrorBody,
    HeadsRequest,
    Verifier,
    now_ms,
    signed_answer,
    verify,
)

with extra_imports("http", "the owner service"):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

MAX_BODY_BYTES = 1 << 20


class NonceCache:
    """Nonces seen within the freshness window; older requests are refused by their timestamp,
    so older nonces need not be remembered. Full means refuse (fail closed), never forget early."""

    def __init__(self, window_ms: int, max_entries: int = 200_000) -> None:
        self.window_ms = window_ms
        self.max_entries = max_entries
        self._seen: OrderedDict[tuple[str, str], int] = OrderedDict()

    def add(self, requester: str, nonce: str, now: int) -> bool:
        """Remember a nonce; False when it was already used or there is no room."""
        while self._seen:
            oldest, seen_at = next(iter(self._seen.items()))
            if now - seen_at <= 2 * self.window_ms:
                break
            del self._seen[oldest]
        key = (requester, nonce)
        if key in self._seen or len(self._seen) >= self.max_entries:
            return False
        self._seen[key] = now
        return True


def _error(status: int, error: str, detail: str = "") -> JSONResponse:
    return JSONResponse(ErrorBody(error=error, detail=detail).model_dump(), status_code=status)


async def _read_body(request: Request, limit: int) -> bytes | None:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(
    agent: str,
    store: AsyncStore | str,
    keyring: Verifier,
    *,
    signing_key: SigningKey | None = None,
    max_skew_s: float = DEFAULT_MAX_SKEW_S,
) -> Starlette:
    """The ASGI app of `agent`'s owner service.

    Args:
        agent: the owner this service speaks for; it must have a secret in `keyring`.
        store: an open store (the caller closes it), or a store URL the app opens and closes
            with its lifespan.
        keyring: the public keys of every agent allowed to ask (a `PublicKeyring`), or a
            shared-secret `Keyring` (deprecated) that also holds this agent's secret.
        signing_key: this agent's Ed25519 key, to sign answers (needed with a public keyring).
        max_skew_s: how far a request's timestamp may be from this service's clock.

    Raises:
        KeyringError: nothing to sign with as `agent`.
    """
    validate_agent(agent)
    signer = own_signer(keyring, agent, signing_key, role="owner")
    window_ms = int(max_skew_s * 1000)
    nonces = NonceCache(window_ms)
    state: dict[str, AsyncStore] = {}
    if isinstance(store, AsyncStore):
        state["store"] = store

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if isinstance(store, str):
            opened = create_async_store(store)
            await opened.setup()
            state["store"] = opened
            try:
                yield
            finally:
                await opened.aclose()
        else:
            yield

    async def heads(request: Request) -> Response:
        body = await _read_body(request, MAX_BODY_BYTES)
        if body is None:
            return _error(413, "too_large", f"request body over {MAX_BODY_BYTES} bytes")
        try:
            req = HeadsRequest.model_validate_json(body)
        except ValidationError as exc:
            return _error(400, "malformed", f"{exc.error_count()} invalid field(s)")
        if not keyring.can_verify(req.requester):
            return _error(401, "unknown_requester", f"no key for {req.requester!r}")
        if not verify(req, keyring):
            return _error(401, "bad_signature", "request signature does not verify")
        if req.owner != agent:
            return _error(403, "wrong_owner", f"this service answers for {agent!r}")
        now = now_ms()
        if abs(now - req.at) > window_ms:
            return _error(401, "stale_request", f"timestamp {req.at} is {now - req.at} ms off")
        if not nonces.add(req.requester, req.nonce, now):
            return _error(401, "replayed_nonce", "nonce already used (or replay cache full)")
        try:
            for key in req.keys:
                validate_key(key)
        except InvalidKeyError as exc:
            return _error(400, "invalid_key", str(exc))
        try:
            states = await state["store"].states(req.keys)
        except StoreError as exc:
            return _error(503, "store_unavailable", str(exc))
        found: dict[str, str | None] = {}
        epochs: dict[str, int] = {}
        not_owned: list[str] = []
        for key in dict.fromkeys(req.keys):
            ks = states.get(key)
            if ks is not None and ks.owner == agent:
                found[key], epochs[key] = ks.head, ks.epoch
            else:
                not_owned.append(key)
        answer = signed_answer(
            signer,
            nonce=req.nonce,
            heads=found,
            epochs=epochs,
            not_owned=not_owned,
            at=now_ms(),
        )
        return JSONResponse(answer.model_dump())

    async def health(request: Request) -> Response:
        payload: dict[str, Any] = {"agent": agent}
        return JSONResponse(payload)

    return Starlette(
        routes=[
            Route("/heads", heads, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
        ],
        lifespan=lifespan,
    )
