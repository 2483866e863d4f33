"""Eager pushes over HTTP: each executor replica's push endpoint (in its own process), and the
writer's side that POSTs every new version with its owner's signed head and waits for the
acknowledgement.

A push is the owner's head as the store keeps it, signed inside the owner's write (Ed25519 over
key, record id, sequence and epoch), with the record: the replica checks it as a gate checks a
head read from an untrusted store (`planfence.demos.pushes`), with the owners' public keys."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import httpx

from planfence.adapters.owner_service import KeyringError, PublicKeyring, load_keyring
from planfence.demos.baselines import EagerReplica
from planfence.demos.bench.harness.tasks import together
from planfence.demos.pushes import RECORD_MISMATCH, PushCheck, PushedHead, PushRefused
from planfence.plugins.gate.decision import HEAD_ROLLBACK
from planfence.shared_memory import PlanfenceError
from planfence.shared_memory.extras import extra_imports
from planfence.shared_memory.records import canonical_json
from planfence.shared_memory.signing import HeadVerifier

from ..harness.wire import request_size, response_head_size

with extra_imports("bench", "planfence bench replay"):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

REPLICA_ENV = "PLANFENCE_REPLAY_REPLICA"
HTTP_TIMEOUT_S = 30.0
KEEPALIVE_S = 120.0
_STATUS = {RECORD_MISMATCH: 400, HEAD_ROLLBACK: 409}  # anything else refused: 401


def create_replica_app(name: str, keyring: HeadVerifier) -> Starlette:
    """One executor replica's push endpoint: verify an owner's signed head and acknowledge it.

    POST /push  {replica, head: {key, owner, record, seq, epoch, sig}, record, feed_seq}
        -> 200 {replica, seq} | 4xx {error, detail}
    GET /health -> {replica, received}

    Args:
        keyring: the writers' (owners') public keys.
    """
    state: dict[str, Any] = {"received": 0, "heads": {}}
    check = PushCheck(keyring)

    async def push(request: Request) -> Response:
        try:
            data = json.loads(await request.body())
            pushed = PushedHead.from_dict(data)
            replica = data["replica"]
        except (ValueError, KeyError, TypeError, AttributeError, PlanfenceError):
            return JSONResponse({"error": "malformed"}, status_code=400)
        if replica != name:
            return JSONResponse({"error": "wrong_replica"}, status_code=403)
        try:
            check.check(pushed)
        except PushRefused as exc:
            body = {"error": exc.error, "detail": exc.detail}
            return JSONResponse(body, status_code=_STATUS.get(exc.error, 401))
        state["heads"][pushed.state.key] = pushed.state.head
        state["received"] += 1
        return JSONResponse({"replica": name, "seq": pushed.feed_seq})

    async def health(request: Request) -> Response:
        return JSONResponse({"replica": name, "received": state["received"]})

    return Starlette(
        routes=[
            Route("/push", push, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
        ]
    )


def replica_app() -> Starlette:
    """App factory (see `services`): the replica named by $PLANFENCE_REPLAY_REPLICA, with the
    owners' public keyring of $PLANFENCE_KEYRING."""
    keyring = load_keyring()
    if not isinstance(keyring, PublicKeyring):  # the owners' signed heads, as the store keeps
        raise KeyringError(f"{keyring.source}: the push replica needs a public keyring (JWK Set)")
    return create_replica_app(os.environ[REPLICA_ENV], keyring)


class Pusher:
    """The writer's side of eager sync: POSTs each new version, with its owner's signed head,
    to one replica.

    `push` is the `EagerSync` hook; it returns when that replica acknowledged the update. Every
    byte on the wire counts (`bytes`), the signature included.
    """

    def __init__(
        self,
        urls: Mapping[str, str],
        *,
        timeout: float = HTTP_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.urls = {name: url.rstrip("/") for name, url in urls.items()}
        self.requests = 0
        self.bytes = 0
        self._names: dict[int, str] = {}
        self._replicas: list[EagerReplica] = []
        self._client = httpx.AsyncClient(
            timeout=timeout,
            transport=transport,
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_S),
        )

    def bind(self, replica: EagerReplica, name: str) -> None:
        self._replicas.append(replica)
        self._names[id(replica)] = name

    async def push(self, replica: EagerReplica, pushed: PushedHead) -> None:
        name = self._names[id(replica)]
        body = canonical_json({"replica": name, **pushed.to_dict()}).encode()
        response = await self._client.post(
            f"{self.urls[name]}/push",
            content=body,
            headers={"content-type": "application/json", "accept-encoding": "identity"},
        )
        self.requests += 1
        self.bytes += request_size(response.request, len(body))
        self.bytes += response_head_size(response) + len(response.content)
        if response.status_code != 200 or response.json().get("seq") != pushed.feed_seq:
            error, detail = _refusal(response)
            raise PushRefused(error, f"{name} refused update {pushed.feed_seq}: {detail}")

    async def warm(self) -> None:
        """Open the kept-alive connection to every replica before anything is timed."""

        async def health(url: str) -> None:
            (await self._client.get(f"{url}/health")).raise_for_status()

        await together([health(url) for url in self.urls.values()])

    async def aclose(self) -> None:
        await self._client.aclose()


def _refusal(response: httpx.Response) -> tuple[str, str]:
    try:
        body = response.json()
        return str(body["error"]), str(body.get("detail") or response.status_code)
    except (ValueError, KeyError, TypeError):
        return "push_failed", f"HTTP {response.status_code}: {response.text[:200]}"
