"""Forwarding a client's request upstream, and answering the questions a 2026-era upstream asks
back (`input_required`) for a handshake-era client that cannot see them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio

from planfence.shared_memory.extras import extra_imports

with extra_imports("mcp", "the MCP proxy"):
    import mcp  # noqa: F401  (the `mcp` extra)

import mcp_types as types
from mcp.shared.dispatcher import ProgressFnT
from mcp_types import LOG_LEVEL_META_KEY

from .meta import forwardable_meta, with_fence
from .peers import DEFAULT_LEGACY_LOG_LEVEL, Origin
from .relay import Relay
from .results import UPSTREAM_ERROR
from .upstream import Upstream, UpstreamFailure

MAX_INPUT_ROUNDS = 10  # the official client's limit on input_required rounds


class Revoked(Exception):
    """The gate no longer allows a call that is waiting on the client's answers."""


class InputRefused(Exception):
    """The client could not or would not answer a question the upstream asked."""

    def __init__(self, error: types.ErrorData) -> None:
        self.error = error
        super().__init__(error.message)


class Forwarder:
    """Sends clients' requests to the upstream on their behalf."""

    def __init__(self, upstream: Upstream, relay: Relay) -> None:
        self.upstream = upstream
        self.relay = relay

    async def forward(
        self,
        origin: Origin,
        method: str,
        params: Mapping[str, Any] | None,
        read_timeout: float | None,
        on_progress: ProgressFnT | None = None,
    ) -> dict[str, Any]:
        """Send a client's request upstream; for a handshake-era client, also answer the
        questions a 2026-era upstream asks back (`input_required`) by asking the client.

        Every retry is a new upstream request: a gated call is judged again before each one
        (`origin.recheck`), as the plan may have gone stale while the client answered.

        Raises:
            UpstreamFailure: the upstream could not answer.
            InputRefused: the client could not or would not answer the upstream's question.
            Revoked: the gate no longer allows the call; nothing more was sent upstream.
        """
        out = self.params(origin, params)
        result = await self.upstream.request(
            method, out, read_timeout=read_timeout, on_progress=on_progress
        )
        rounds = 0
        delay = 0.05
        while result.get("resultType") == "input_required" and not origin.peer.modern:
            rounds += 1
            if rounds > MAX_INPUT_ROUNDS:
                message = f"the upstream asked for input more than {MAX_INPUT_ROUNDS} times"
                raise UpstreamFailure(UPSTREAM_ERROR, message)
            requests = result.get("inputRequests")
            retry = dict(out)
            retry.pop("inputResponses", None)
            retry.pop("requestState", None)
            if isinstance(requests, Mapping) and requests:
                answers = await self.relay.answer_input_requests(origin, requests)
                if isinstance(answers, types.ErrorData):
                    raise InputRefused(answers)
                retry["inputResponses"] = answers
                delay = 0.05
            else:
                await anyio.sleep(delay)
                delay = min(delay * 2, 0.25)
            if result.get("requestState") is not None:
                retry["requestState"] = result["requestState"]
            if origin.recheck is not None and not await origin.recheck():
                raise Revoked
            if origin.fence is not None:  # the retry carries the token of the new judgement
                retry["_meta"] = with_fence(retry.get("_meta") or {}, origin.fence())
            result = await self.upstream.request(
                method, retry, read_timeout=read_timeout, on_progress=on_progress
            )
        return result

    def params(self, origin: Origin, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """The request's params as sent upstream, with the `_meta` that may go there."""
        out = dict(params or {})
        raw_meta = out.pop("_meta", None)
        meta = forwardable_meta(raw_meta)
        if self.upstream.modern:
            # A 2026-era upstream sends logs only to requests that opt in: a 2026-era client's
            # own choice is kept, a handshake-era client gets the level it set (or every level).
            if origin.peer.modern:
                level = raw_meta.get(LOG_LEVEL_META_KEY) if isinstance(raw_meta, Mapping) else None
            else:
                level = origin.peer.log_level or DEFAULT_LEGACY_LOG_LEVEL
            if level is not None:
                meta = {**(meta or {}), LOG_LEVEL_META_KEY: level}
        if meta:
            out["_meta"] = meta
        return out
