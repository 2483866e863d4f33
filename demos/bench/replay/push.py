"""Eager pushes over HTTP: each executor replica's push endpoint (in its own process), and the
writer's side that signs every new version and waits for the acknowledgement."""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Mapping
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from planfence.adapters.owner_service import Keyring, KeyringError, load_keyring
from planfence.adapters.owner_service.wire import signature
from planfence.demos.baselines import EagerReplica
from planfence.shared_memory import Change, PlanFenceError, Record, canonical_json

from ..harness import together
from ..harness.wire import request_size, response_head_size

REPLICA_ENV = "PLANFENCE_REPLAY_REPLICA"
PUSH_PURPOSE = b"planfence-replay-push/1\n"
HTTP_TIMEOUT_S = 30.0
KEEPALIVE_S = 120.0


def create_replica_app(name: str, keyring: Keyring) -> Starlette:
    """One executor replica's push endpoint: verify a writer's signed update and acknowledge it.

    POST /push  {writer, replica, change, record, sig} -> 200 {replica, seq} | 4xx {error}
    GET /health -> {replica, received}
    """
    state: dict[str, Any] = {"received": 0, "heads": {}}

    async def push(request: Request) -> Response:
        try:
            data = json.loads(await request.body())
            sig = data.pop("sig")
            writer, change, record = data["writer"], data["change"], data["record"]
            rec = Record.from_dict(record)
        except (ValueError, KeyError, TypeError, AttributeError, PlanFenceError):
            return JSONResponse({"error": "malformed"}, status_code=400)
        secret = keyring.get(writer) if isinstance(writer, str) else None
        if secret is None or not isinstance(sig, str):
            return JSONResponse({"error": "unknown_writer"}, status_code=401)
        if not hmac.compare_digest(signature(secret, PUSH_PURPOSE, data), sig):
            return JSONResponse({"error": "bad_signature"}, status_code=401)
        if data.get("replica") != name:
            return JSONResponse({"error": "wrong_replica"}, status_code=403)
        if rec.id != change.get("head") or rec.key != change.get("key"):
            return JSONResponse({"error": "record_mismatch"}, status_code=400)
        state["heads"][rec.key] = rec.id
        state["received"] += 1
        return JSONResponse({"replica": name, "seq": change.get("seq")})

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
    keyring of $PLANFENCE_KEYRING."""
    keyring = load_keyring()
    if not isinstance(keyring, Keyring):  # the eager-push baseline signs with shared secrets
        raise KeyringError(f"{keyring.source}: the push replica needs a shared-secret keyring")
    return create_replica_app(os.environ[REPLICA_ENV], keyring)


class PushRefused(RuntimeError):
    """A replica did not acknowledge an update."""


class Pusher:
    """The writer's side of eager sync: signs each new version and POSTs it to one replica.

    `push` is the `EagerSync` hook; it returns when that replica acknowledged the update.
    """

    def __init__(
        self,
        urls: Mapping[str, str],
        keyring: Keyring,
        *,
        timeout: float = HTTP_TIMEOUT_S,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.urls = {name: url.rstrip("/") for name, url in urls.items()}
        self.keyring = keyring
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

    async def push(self, replica: EagerReplica, change: Change, record: Record) -> None:
        name = self._names[id(replica)]
        fields: dict[str, Any] = {
            "writer": record.author,
            "replica": name,
            "change": change.to_dict(),
            "record": record.to_dict(),
        }
        sig = signature(self.keyring[record.author], PUSH_PURPOSE, fields)
        body = canonical_json({**fields, "sig": sig}).encode()
        response = await self._client.post(
            f"{self.urls[name]}/push",
            content=body,
            headers={"content-type": "application/json", "accept-encoding": "identity"},
        )
        self.requests += 1
        self.bytes += request_size(response.request, len(body))
        self.bytes += response_head_size(response) + len(response.content)
        if response.status_code != 200 or response.json().get("seq") != change.seq:
            raise PushRefused(f"{name} refused update {change.seq}: {response.text[:200]}")

    async def warm(self) -> None:
        """Open the kept-alive connection to every replica before anything is timed."""

        async def health(url: str) -> None:
            (await self._client.get(f"{url}/health")).raise_for_status()

        await together([health(url) for url in self.urls.values()])

    async def aclose(self) -> None:
        await self._client.aclose()
