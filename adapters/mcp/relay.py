"""What the upstream sends the proxy's clients besides the answers to their requests.

    upstream --(sampling, elicitation, roots, progress, logs, change notices)--> the right client

One upstream connection serves every client of the proxy, so each message from the upstream has
to find its client, and passes to it as it came:

- A request the upstream makes while serving a forwarded request (sampling, elicitation, roots)
  goes to the client whose request it is, as part of that request (over streamable HTTP it rides
  that request's response stream). Over a streamable-HTTP upstream the association is exact; over
  a stdio upstream the wire carries none, so the proxy uses the one forwarded request in flight,
  or the latest one if all in-flight requests come from the same client. A request that comes
  while none is in flight (the filesystem server asks for roots as soon as it is initialized)
  goes to the proxy's client when it has exactly one (a stdio front), once that client has
  finished its handshake. When requests of several clients are in flight, or the client cannot
  answer (it did not declare the capability, or it speaks the 2026-07-28 protocol, which has no
  server-to-client requests), the upstream gets the error the client's SDK would have given it:
  INVALID_REQUEST, "<capability> not supported". For a gated call, the client's answer is handed
  over only if the call is still allowed (`Call.recheck`).
- Progress goes to the request whose progress token it names.
- Log messages go to the client whose request produced them, filtered by that client's own
  log-level choice (a 2026-era request's opt-in); a log known to come from a request that has
  since finished goes to that request's client alone (outside the request) or nowhere; logs tied
  to no request go to every handshake-era client.
- A URL-mode elicitation's completion notice goes to the client that elicitation was sent to,
  and nowhere if the proxy did not send it.
- List-changed and resource-updated notices go to every client: as notifications to
  handshake-era clients (resource updates only to those that subscribed to the resource), and as
  events on `subscriptions/listen` streams to 2026-era clients. A 2026-era upstream sends them
  only on a listen stream: the proxy keeps one open to it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from planfence.shared_memory.extras import extra_imports

from . import jsonrpc as rpc
from .links import UpstreamFailure
from .peers import Call, Peer

with extra_imports("mcp", "the MCP proxy"):
    from ._extra import require

    require()

if TYPE_CHECKING:
    from .proxy import PlanfenceProxy

logger = logging.getLogger("planfence.mcp")

# The error a handshake-era upstream gets instead of the client's answer when the call that
# asked is no longer allowed by the gate.
REVOKED_MESSAGE = "planfence: the call is no longer allowed (its plan went stale); answer withheld"
CAPABILITY = {"sampling/createMessage": "sampling", "elicitation/create": "elicitation"}
CAPABILITY_NAMES = {
    "sampling/createMessage": "Sampling",
    "elicitation/create": "Elicitation",
    "roots/list": "List roots",
}
CHANGES = {
    "notifications/tools/list_changed": "toolsListChanged",
    "notifications/prompts/list_changed": "promptsListChanged",
    "notifications/resources/list_changed": "resourcesListChanged",
}
UPDATED = "notifications/resources/updated"
MAX_URL_ELICITATIONS = 1024
DEFAULT_LEGACY_LOG_LEVEL = "debug"  # a handshake-era client gets every level until it sets one


def unsupported(method: str) -> dict[str, Any]:
    """The answer the official client SDK gives when a capability is missing."""
    name = CAPABILITY_NAMES.get(method, method)
    return {"code": rpc.INVALID_REQUEST, "message": f"{name} not supported"}


def _capable(peer: Peer, method: str, params: Mapping[str, Any]) -> bool:
    if peer.modern:
        return False
    if method == "roots/list":
        return peer.can("roots")
    if method == "sampling/createMessage" and (params.get("tools") or params.get("toolChoice")):
        sampling = peer.capabilities.get("sampling")
        return isinstance(sampling, dict) and isinstance(sampling.get("tools"), dict)
    return peer.can(CAPABILITY.get(method, method))


class Relay:
    """Routes the upstream's requests and notifications; serves subscriptions and listen
    streams. `single_client`: the proxy has exactly one client (a stdio front)."""

    def __init__(self, proxy: PlanfenceProxy, *, single_client: bool, ask_timeout: float | None):
        self.proxy = proxy
        self.single_client = single_client
        self.ask_timeout = ask_timeout
        self.first_client = asyncio.Event()  # the first client's era is known
        self.watchers: dict[str, int] = {}  # resource -> clients subscribed to it
        self.listeners: dict[int, tuple[Call, dict[str, Any], frozenset[str]]] = {}
        self.url_elicitations: dict[str, Peer] = {}

    # -- which request a message belongs to ---------------------------------------------------

    def origin(self, related: Any) -> Call | None:
        """The client request an upstream message belongs to, or None if that cannot be told.
        A message known to belong to a request that has finished has none."""
        if isinstance(related, Call):
            return related if related.peer.calls.get(related.id) is related else None
        live = self.in_flight()
        if not live:
            return None
        last = live[-1]
        return last if all(c.peer is last.peer for c in live) else None

    def in_flight(self) -> list[Call]:
        return [c for c in self.proxy.upstream.pending.values() if isinstance(c, Call)]

    def handshake_peers(self) -> list[Peer]:
        return [p for p in self.proxy.peers if not p.modern and p.session and not p.closed]

    # -- from the upstream --------------------------------------------------------------------

    def on_message(self, message: dict[str, Any], raw: bytes | None, related: Any) -> None:
        if "id" in message:
            self.proxy.spawn(self._asked(message, raw, related))
            return
        method = message["method"]
        params = rpc.params_of(message)
        if method == "notifications/progress":
            self._progress(params, raw)
        elif method == "notifications/message":
            self._log(params, raw, related)
        elif method in CHANGES or method == UPDATED:
            self.publish(method, params.get("uri"), raw)
        elif method == "notifications/elicitation/complete":
            peer = self.url_elicitations.pop(str(params.get("elicitationId")), None)
            if peer is not None and not peer.closed:
                peer.forward(raw or rpc.encode(message))
        elif method == "notifications/cancelled":
            self._cancelled(params)
        elif method != "notifications/subscriptions/acknowledged":
            origin = self.origin(related)
            only = self.handshake_peers()
            if origin is not None:
                origin.peer.forward(raw or rpc.encode(message), origin)
            elif self.single_client and len(only) == 1:
                only[0].forward(raw or rpc.encode(message))

    def _progress(self, params: dict[str, Any], raw: bytes | None) -> None:
        call = self.proxy.flight.tokens.get(params.get("progressToken"))
        if call is None or call.peer.calls.get(call.id) is not call:
            return
        if call.token != call.upstream_token:
            out = {**params, "progressToken": call.token}
            call.peer.send(rpc.notification("notifications/progress", out), call)
        else:
            notice = raw or rpc.encode(rpc.notification("notifications/progress", params))
            call.peer.forward(notice, call)

    def _log(self, params: dict[str, Any], raw: bytes | None, related: Any) -> None:
        level = params.get("level")
        data = raw or rpc.encode(rpc.notification("notifications/message", params))
        origin = self.origin(related)
        if origin is not None:
            if origin.modern or origin.peer.modern:
                allowed = rpc.levels_from(origin.log_level) if origin.log_level else frozenset()
            else:
                allowed = rpc.levels_from(origin.peer.log_level or DEFAULT_LEGACY_LOG_LEVEL)
            if level in allowed:
                origin.peer.forward(data, origin)
            return
        if isinstance(related, Call):
            # Its request is over: to the same client, outside the request, or nowhere.
            peer = related.peer
            wanted = rpc.levels_from(peer.log_level or DEFAULT_LEGACY_LOG_LEVEL)
            if not peer.modern and peer.session and not peer.closed and level in wanted:
                peer.forward(data)
            return
        if self.in_flight():
            logger.debug("log message from the upstream matches no single client; dropped")
            return
        for peer in self.handshake_peers():
            if level in rpc.levels_from(peer.log_level or DEFAULT_LEGACY_LOG_LEVEL):
                peer.forward(data)

    def _cancelled(self, params: dict[str, Any]) -> None:
        """The upstream gave up a question it asked a client: so does the proxy."""
        asked = params.get("requestId")
        for peer in self.proxy.peers:
            for client_id, (waiter, upstream_id) in list(peer.asked.items()):
                if upstream_id == asked and not waiter.done():
                    waiter.set_result(
                        (rpc.error(client_id, rpc.REQUEST_TIMEOUT, "cancelled"), None)
                    )
                    peer.send(
                        rpc.notification(
                            "notifications/cancelled", {**params, "requestId": client_id}
                        )
                    )

    async def _asked(self, message: dict[str, Any], raw: bytes | None, related: Any) -> None:
        """A request from the upstream: answered by the client it belongs to."""
        upstream_id, method = message["id"], message["method"]
        params = rpc.params_of(message)
        if method == "ping":
            self._answer_upstream(rpc.result(upstream_id, {}))
            return
        origin = self.origin(related)
        peer = origin.peer if origin is not None else await self._only_client()
        if peer is None:
            logger.warning("%s from the upstream matches no single client request; refused", method)
            self._answer_upstream(rpc.error(upstream_id, **unsupported(method)))
            return
        answer, answer_raw = await self.ask(peer, origin, method, params, raw, upstream_id)
        judged = origin.recheck if origin is not None else None
        if judged is not None and "result" in answer and not await judged():
            assert origin is not None
            origin.revoked = True
            answer = rpc.error(upstream_id, rpc.INVALID_REQUEST, REVOKED_MESSAGE)
            answer_raw = None
        if answer.get("id") != upstream_id:
            answer, answer_raw = {**answer, "id": upstream_id}, None
        self._answer_upstream(answer, answer_raw)

    def _answer_upstream(self, message: dict[str, Any], raw: bytes | None = None) -> None:
        try:
            self.proxy.upstream.send(message, raw)
        except UpstreamFailure:
            logger.debug("could not answer the upstream: it went away")

    async def _only_client(self) -> Peer | None:
        """The proxy's one client (a stdio front), once its handshake is done; None when the
        proxy may have several clients, or its client cannot be asked (a 2026-era client)."""
        if not self.single_client:
            return None
        try:
            await asyncio.wait_for(self.first_client.wait(), self.ask_timeout)
        except TimeoutError:
            return None
        peers = self.handshake_peers()
        return peers[0] if len(peers) == 1 else None

    async def ask(
        self,
        peer: Peer,
        origin: Call | None,
        method: str,
        params: dict[str, Any],
        raw: bytes | None = None,
        preferred: Any = None,
    ) -> tuple[dict[str, Any], bytes | None]:
        """Put one question to a client: its answer (a response message, and its bytes), or
        the error message to answer with instead."""
        if not _capable(peer, method, params):
            return rpc.error(preferred, **unsupported(method)), None
        client_id = peer.new_id(preferred)
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        peer.asked[client_id] = (waiter, preferred)
        if method == "elicitation/create" and params.get("mode") == "url":
            self._remember_url_elicitation(params.get("elicitationId"), peer)
        if raw is not None and client_id == preferred:
            peer.forward(raw, origin)
        else:
            peer.send(rpc.request(client_id, method, params), origin)
        try:
            answer, answer_raw = await asyncio.wait_for(waiter, self.ask_timeout)
        except TimeoutError:
            message = f"the client did not answer {method} in {self.ask_timeout} s"
            return rpc.error(preferred, rpc.REQUEST_TIMEOUT, message), None
        finally:
            peer.asked.pop(client_id, None)
        if not isinstance(answer.get("result"), dict) and "error" not in answer:
            return rpc.error(preferred, rpc.INTERNAL_ERROR, "the client answered oddly"), None
        return answer, answer_raw

    def answered(self, peer: Peer, message: dict[str, Any], raw: bytes | None) -> None:
        """A client's answer to a question the proxy put to it."""
        found = peer.asked.get(message.get("id")) if rpc.valid_id(message.get("id")) else None
        if found is not None and not found[0].done():
            found[0].set_result((message, raw))

    async def answer_inputs(self, call: Call, requests: Mapping[str, Any]) -> dict[str, Any]:
        """Answers to a 2026-era upstream's `inputRequests`, asked of a handshake-era client:
        the `inputResponses` to retry with, or (`"error"`) the first refusal."""
        answers: dict[str, Any] = {}

        async def one(key: str, request: Any) -> None:
            if not isinstance(request, Mapping) or not isinstance(request.get("method"), str):
                raise _Refusal({"code": rpc.INVALID_PARAMS, "message": f"malformed input {key!r}"})
            params = request.get("params")
            got, _ = await self.ask(
                call.peer, call, request["method"], dict(params) if isinstance(params, dict) else {}
            )
            if "error" in got:
                raise _Refusal(got["error"])
            answers[key] = got["result"]

        try:
            await asyncio.gather(*(one(k, r) for k, r in requests.items()))
        except _Refusal as refusal:
            return {"error": refusal.error}
        return {"inputResponses": answers}

    def _remember_url_elicitation(self, elicitation: Any, peer: Peer) -> None:
        if not isinstance(elicitation, str):
            return
        if len(self.url_elicitations) >= MAX_URL_ELICITATIONS:
            del self.url_elicitations[next(iter(self.url_elicitations))]  # the oldest
        self.url_elicitations[elicitation] = peer

    # -- change notices -----------------------------------------------------------------------

    def publish(self, method: str, uri: Any = None, raw: bytes | None = None) -> None:
        """Deliver a change notice to every client."""
        plain = rpc.notification(method, {"uri": uri} if method == UPDATED else None)
        for peer in self.handshake_peers():
            if method != UPDATED or uri in peer.subscriptions:
                peer.forward(raw or rpc.encode(plain))
        for call, honored, uris in list(self.listeners.values()):
            wanted = uri in uris if method == UPDATED else honored.get(CHANGES[method]) is True
            if wanted:
                params: dict[str, Any] = {"_meta": {rpc.SUBSCRIPTION_ID: call.id}}
                if method == UPDATED:
                    params["uri"] = uri
                call.peer.send(rpc.notification(method, params), call)

    def listen(self, call: Call, params: dict[str, Any]) -> None:
        """Serve a 2026-era client's `subscriptions/listen`: acknowledge, then stream events
        until the client cancels."""
        wanted = params.get("notifications")
        wanted = wanted if isinstance(wanted, dict) else {}
        honored: dict[str, Any] = {k: True for k in CHANGES.values() if wanted.get(k) is True}
        uris = [u for u in wanted.get("resourceSubscriptions") or () if isinstance(u, str)]
        if uris:
            honored["resourceSubscriptions"] = uris
        self.listeners[id(call)] = (call, honored, frozenset(uris))
        meta = {rpc.SUBSCRIPTION_ID: call.id}
        ack = {"notifications": honored, "_meta": meta}
        call.peer.send(rpc.notification("notifications/subscriptions/acknowledged", ack), call)

    def unlisten(self, call: Call) -> None:
        self.listeners.pop(id(call), None)

    async def own_listen(self) -> None:
        """Keep a listen stream open to a 2026-era upstream, for its change events."""
        caps = self.proxy.upstream.capabilities
        wanted = {
            key: True
            for key, cap in zip(CHANGES.values(), ("tools", "prompts", "resources"), strict=True)
            if isinstance(caps.get(cap), dict) and caps[cap].get("listChanged")
        }
        if wanted:
            params = {"notifications": wanted}
            await self.proxy.upstream.request("subscriptions/listen", params, read_timeout=None)

    # -- connection-level requests of handshake-era clients ----------------------------------

    async def subscribe(self, call: Call, uri: str) -> None:
        peer = call.peer
        if uri not in peer.subscriptions:
            if self.watchers.get(uri, 0) == 0:
                await self._upstream("resources/subscribe", {"uri": uri})
            self.watchers[uri] = self.watchers.get(uri, 0) + 1
            peer.subscriptions.add(uri)

    async def unsubscribe(self, call: Call, uri: str) -> None:
        peer = call.peer
        if uri in peer.subscriptions:
            peer.subscriptions.discard(uri)
            left = self.watchers.get(uri, 1) - 1
            if left <= 0:
                self.watchers.pop(uri, None)
                await self._upstream("resources/unsubscribe", {"uri": uri})
            else:
                self.watchers[uri] = left

    async def set_level(self, call: Call, level: str) -> None:
        call.peer.log_level = level
        upstream = self.proxy.upstream
        if not upstream.modern and "logging" in upstream.capabilities:
            # The upstream connection is shared: the lowest level any client asked for, so
            # each client still gets what it asked for (the proxy filters per client).
            levels = [p.log_level or DEFAULT_LEGACY_LOG_LEVEL for p in self.handshake_peers()]
            lowest = min(levels, key=rpc.LEVELS.index, default=level)
            await self._upstream("logging/setLevel", {"level": lowest})

    async def resubscribe(self) -> None:
        """The upstream was restarted: subscribe again to what the proxy's clients watch."""
        for uri in list(self.watchers):
            try:
                await self._upstream("resources/subscribe", {"uri": uri})
            except UpstreamFailure as exc:
                logger.warning("could not subscribe again to %s: %s", uri, exc)

    def forget(self, peer: Peer) -> None:
        """A client went away: its questions, listen streams and subscriptions go with it."""
        for waiter, _ in peer.asked.values():
            if not waiter.done():
                gone = rpc.error(None, rpc.CONNECTION_CLOSED, "the client went away")
                waiter.set_result((gone, None))
        for key, (call, _, _) in list(self.listeners.items()):
            if call.peer is peer:
                del self.listeners[key]
        for elicitation, owner in list(self.url_elicitations.items()):
            if owner is peer:
                del self.url_elicitations[elicitation]
        for uri in sorted(peer.subscriptions):
            left = self.watchers.get(uri, 1) - 1
            if left > 0:
                self.watchers[uri] = left
                continue
            self.watchers.pop(uri, None)

            async def unsubscribe(uri: str = uri) -> None:
                if self.watchers.get(uri, 0) == 0:  # unless a client subscribed again
                    await self._upstream("resources/unsubscribe", {"uri": uri})

            self.proxy.upstream.spawn(unsubscribe)
        peer.subscriptions.clear()

    async def _upstream(self, method: str, params: dict[str, Any]) -> None:
        upstream = self.proxy.upstream
        await upstream.request(method, params, read_timeout=upstream.request_timeout)


class _Refusal(Exception):
    def __init__(self, error: Any) -> None:
        self.error = error if isinstance(error, dict) else {"code": 0, "message": str(error)}
        super().__init__(self.error.get("message"))
