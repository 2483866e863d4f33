"""Between the two protocol eras: the proxy's clients and its upstream need not speak the same one.

The proxy opens its upstream in the upstream's newest era and answers each client's own
handshake itself (`initialize` in the 2025-11-25 era, `server/discover` in the 2026-07-28 era),
from what the upstream said. When a request's era is the upstream's, it passes as it came;
otherwise only its envelope changes on the way up (the 2026-era `_meta` keys added or removed)
and its result's era fields on the way back (`to_client`). A 2026-era upstream asks for input
with an `input_required` result: a 2026-era client answers it itself, while for a handshake-era
client the proxy asks the client these questions as ordinary requests and retries the request
with the answers (`exchange`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from . import jsonrpc as rpc
from .links import UPSTREAM_ERROR, UpstreamFailure
from .meta import with_fence
from .peers import Call, Peer
from .relay import DEFAULT_LEGACY_LOG_LEVEL
from .upstream import Upstream, _version

if TYPE_CHECKING:
    from .proxy import PlanfenceProxy

MAX_INPUT_ROUNDS = 10  # the official client's limit on input_required rounds
NO_CACHE = {"ttlMs": 0, "cacheScope": "private"}  # immediately stale, never shared


class Revoked(Exception):
    """The gate no longer allows a call that is waiting on the client's answers."""


class InputRefused(Exception):
    """The client could not or would not answer a question the upstream asked."""

    def __init__(self, error: Mapping[str, Any]) -> None:
        self.error = dict(error)
        super().__init__(str(error.get("message")))


def advertised(upstream: Upstream) -> dict[str, Any]:
    """The capabilities the proxy offers its clients: the upstream's, as far as it serves them."""
    caps = upstream.capabilities
    served = ("tools", "prompts", "completions", "tasks")
    out: dict[str, Any] = {k: caps[k] for k in served if k in caps}
    resources = caps.get("resources")
    if isinstance(resources, dict):
        # Subscriptions are kept by the proxy for handshake-era upstreams only.
        out["resources"] = {k: v for k, v in resources.items() if k != "subscribe"}
        if not upstream.modern and resources.get("subscribe"):
            out["resources"]["subscribe"] = True
    out["logging"] = {}
    return out


def server_info(upstream: Upstream) -> dict[str, Any]:
    info: dict[str, Any] = {"name": "planfence-proxy", "version": _version()}
    name = upstream.server_info.get("name")
    if isinstance(name, str):
        info["title"] = f"{name} (gated by planfence)"
    return info


def initialize_result(upstream: Upstream, requested: Any) -> dict[str, Any]:
    """The proxy's answer to a handshake-era client's `initialize`."""
    version = requested if requested in rpc.HANDSHAKE_VERSIONS else rpc.LATEST_HANDSHAKE
    out = {
        "protocolVersion": version,
        "capabilities": advertised(upstream),
        "serverInfo": server_info(upstream),
    }
    return _with_instructions(out, upstream)


def discover_result(upstream: Upstream) -> dict[str, Any]:
    """The proxy's answer to a 2026-era client's `server/discover`."""
    out = {
        "supportedVersions": list(rpc.MODERN_VERSIONS),
        "capabilities": advertised(upstream),
        "resultType": "complete",
        **NO_CACHE,
        "_meta": {rpc.SERVER_INFO: server_info(upstream)},
    }
    return _with_instructions(out, upstream)


def _with_instructions(out: dict[str, Any], upstream: Upstream) -> dict[str, Any]:
    instructions = upstream.info.get("instructions")
    if isinstance(instructions, str):
        out["instructions"] = instructions
    return out


def to_upstream(message: dict[str, Any], modern: bool, peer: Peer, upstream: Upstream) -> Any:
    """A client's request or notification in the upstream's era (only its envelope changes)."""
    params = dict(rpc.params_of(message))
    meta = rpc.meta_of(params)
    if modern:  # to a handshake-era upstream: the envelope stays behind
        meta = {k: v for k, v in meta.items() if not k.startswith(rpc.ENVELOPE_PREFIX)}
    else:  # to a 2026-era upstream: the proxy's envelope, and the client's own log level
        meta = upstream.envelope(meta)
        meta[rpc.LOG_LEVEL] = peer.log_level or DEFAULT_LEGACY_LOG_LEVEL
    if meta:
        params["_meta"] = meta
    else:
        params.pop("_meta", None)
    return {**message, "params": params}


def to_client(result: dict[str, Any], method: str, modern: bool, upstream: Upstream) -> Any:
    """A result in the era of the client that asked (`modern`)."""
    if modern == upstream.modern:
        return result
    out = dict(result)
    if modern:  # from a handshake-era upstream: complete, and immediately stale
        out.setdefault("resultType", "complete")
        if method in rpc.CACHEABLE:
            for key, value in NO_CACHE.items():
                out.setdefault(key, value)
        return out
    for key in rpc.MODERN_RESULT_FIELDS:
        out.pop(key, None)
    meta = out.get("_meta")
    if isinstance(meta, dict):
        kept = {k: v for k, v in meta.items() if not k.startswith(rpc.ENVELOPE_PREFIX)}
        if kept:
            out["_meta"] = kept
        else:
            del out["_meta"]
    return out


async def exchange(
    proxy: PlanfenceProxy,
    call: Call,
    message: dict[str, Any],
    timeout: float | None,
    *,
    recheck: Callable[[], Awaitable[bool]] | None = None,
    fence: Callable[[], Mapping[str, Any] | None] | None = None,
) -> dict[str, Any]:
    """Send a request upstream and wait for its answer; for a handshake-era client, also
    answer the questions a 2026-era upstream asks back (`input_required`) by asking the client.

    Every retry is a new upstream request: a gated call is judged again before each one
    (`recheck`), as the plan may have gone stale while the client answered.

    Raises:
        UpstreamFailure: the upstream could not answer.
        InputRefused: the client could not or would not answer the upstream's question.
        Revoked: the gate no longer allows the call; nothing more was sent upstream.
    """
    got = await proxy.flight.roundtrip(call, message, timeout)
    rounds, delay = 0, 0.05
    while not call.modern and proxy.upstream.modern:
        result = got.get("result")
        if not isinstance(result, dict) or result.get("resultType") != "input_required":
            break
        rounds += 1
        if rounds > MAX_INPUT_ROUNDS:
            text = f"the upstream asked for input more than {MAX_INPUT_ROUNDS} times"
            raise UpstreamFailure(UPSTREAM_ERROR, text)
        params = {
            k: v
            for k, v in rpc.params_of(message).items()
            if k not in ("inputResponses", "requestState")
        }
        requests = result.get("inputRequests")
        if isinstance(requests, Mapping) and requests:
            answers = await proxy.relay.answer_inputs(call, requests)
            if "error" in answers:
                raise InputRefused(answers["error"])
            params["inputResponses"] = answers["inputResponses"]
            delay = 0.05
        else:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)
        if result.get("requestState") is not None:
            params["requestState"] = result["requestState"]
        if recheck is not None and not await recheck():
            raise Revoked
        if fence is not None:  # the retry carries the token of the new judgement
            params["_meta"] = with_fence(rpc.meta_of(params), fence())
        message = {**message, "params": params}
        got = await proxy.flight.roundtrip(call, message, timeout)
    return got
