"""A misbehaving owner service, for fault injection: the real owner app, wrapped.

The first path segment picks the fault: `POST /{mode}/heads`. Runs in-process (ASGI) or as a
uvicorn server: `python fault_owner.py --agent reviser --store URL --port N --impostor intruder`
(keyring from $PLANFENCE_KEYRING).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from planfence.adapters.owner_service import Keyring, load_keyring
from planfence.adapters.owner_service.server import create_app
from planfence.adapters.owner_service.wire import signed_answer
from planfence.shared_memory import AsyncStore, create_async_store

MODES = (
    "honest",  # passes the real answer through
    "slow",  # answers correctly, after the client has given up
    "garbage",  # 200 with a body that is not an answer
    "wrong_signature",  # real answer, signature altered
    "wrong_owner",  # an answer correctly signed by another agent, in its own name
    "replay",  # the first answer it ever gave, for every later request
    "missing_key",  # drops one asked key from the answer
    "refuse",  # 401, as if the requester's credentials were wrong
    "server_error",  # 500
)

# The block reason the gate must give for each fault ("down": nothing listens at the address).
EXPECTED_BLOCK = {
    "down": "owner_unreachable",
    "slow": "owner_unreachable",
    "server_error": "owner_unreachable",
    "garbage": "owner_unauthenticated",
    "wrong_signature": "owner_unauthenticated",
    "wrong_owner": "owner_unauthenticated",
    "replay": "owner_unauthenticated",
    "missing_key": "owner_unauthenticated",
    "refuse": "owner_unauthenticated",
}


def create_fault_app(
    agent: str,
    store: AsyncStore | str,
    keyring: Keyring,
    *,
    impostor: str,
    delay_s: float = 2.0,
) -> Starlette:
    opened: dict[str, AsyncStore] = {}
    if isinstance(store, AsyncStore):
        opened["store"] = store
    first_answer: dict[str, bytes] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if isinstance(store, str):
            s = create_async_store(store)
            await s.setup()
            opened["store"] = s
            try:
                yield
            finally:
                await s.aclose()
        else:
            yield

    async def real_answer(body: bytes) -> httpx.Response:
        real = create_app(agent, opened["store"], keyring)
        transport = httpx.ASGITransport(app=real)
        async with httpx.AsyncClient(transport=transport, base_url="http://owner") as client:
            return await client.post(
                "/heads", content=body, headers={"content-type": "application/json"}
            )

    async def heads(request: Request) -> Response:
        mode = request.path_params["mode"]
        if mode not in MODES:
            return JSONResponse({"error": "unknown_mode"}, status_code=404)
        body = await request.body()
        if mode == "garbage":
            return Response(b"\x00\xff{not an answer", media_type="application/json")
        if mode == "refuse":
            return JSONResponse({"error": "bad_signature", "detail": "injected"}, status_code=401)
        if mode == "server_error":
            return Response(b"internal error", status_code=500)
        if mode == "slow":
            await asyncio.sleep(delay_s)
        upstream = await real_answer(body)
        if upstream.status_code != 200:
            return Response(upstream.content, status_code=upstream.status_code)
        answer: dict[str, Any] = json.loads(upstream.content)
        if mode == "replay":
            # One first answer per address: `/replay/<run>/heads` starts a fresh replay.
            first = first_answer.setdefault(request.url.path, upstream.content)
            return Response(first, media_type="application/json")
        if mode == "wrong_signature":
            answer["sig"] = answer["sig"][:-1] + ("0" if answer["sig"][-1] != "0" else "1")
        elif mode == "wrong_owner":
            answer = signed_answer(
                keyring[impostor],
                agent=impostor,
                nonce=answer["nonce"],
                heads=answer["heads"],
                epochs=answer["epochs"],
                not_owned=answer["not_owned"],
                at=answer["at"],
            ).model_dump()
        elif mode == "missing_key":
            dropped = dict(answer["heads"])
            if dropped:
                dropped.pop(sorted(dropped)[-1])
            answer = signed_answer(
                keyring[agent],
                agent=agent,
                nonce=answer["nonce"],
                heads=dropped,
                epochs=answer["epochs"],
                not_owned=answer["not_owned"],
                at=answer["at"],
            ).model_dump()
        return JSONResponse(answer)

    async def health(request: Request) -> Response:
        return JSONResponse({"agent": agent, "faults": list(MODES)})

    return Starlette(
        routes=[
            Route("/{mode}/heads", heads, methods=["POST"]),
            Route("/{mode}/{run}/heads", heads, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
        ],
        lifespan=lifespan,
    )


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--agent", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--impostor", required=True)
    parser.add_argument("--delay", type=float, default=2.0)
    args = parser.parse_args()
    app = create_fault_app(
        args.agent, args.store, load_keyring(), impostor=args.impostor, delay_s=args.delay
    )
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
