"""What the upstream sends the proxy's clients besides the answers to their requests.

    upstream --(sampling, elicitation, roots, logs, change notices)--> proxy --> the right client

One upstream connection serves every client of the proxy, so each message from the upstream has
to find its client:

- A request the upstream makes while serving a forwarded request (sampling, elicitation, roots)
  is sent to the client whose request it is, as part of that request (`related_request_id`: over
  streamable HTTP it rides that request's response stream). Over a streamable-HTTP upstream the
  association is exact; over a stdio upstream the wire carries none, so the proxy uses the one
  forwarded request in flight, or the latest one if all in-flight requests come from the same
  client. A request that comes while no forwarded request is in flight (the filesystem server
  asks for roots as soon as it is initialized, and again when they change) goes to the proxy's
  client when it has exactly one (a stdio front), outside any request, once that client has
  finished its handshake. When requests of several clients are in flight, or the client cannot
  answer (it did not
  declare the capability, or it speaks the 2026-07-28 protocol, which has no server-to-client
  requests), the upstream gets the error the client's SDK would have given it: INVALID_REQUEST,
  "<capability> not supported".
- A 2026-era upstream asks through an `input_required` result instead. A 2026-era client gets that
  result as is and answers it itself (its retry is a new `tools/call`, gated again); for a
  handshake-era client the proxy asks the client these questions as ordinary requests and retries
  the upstream call with the answers.
- Log messages go to the client whose request produced them, filtered by that client's own
  log-level choice; a log known to come from a request that has since finished goes to that
  request's client alone (outside the request) or nowhere, never to whoever is in flight; logs
  not tied to any request go to every handshake-era client.
- A URL-mode elicitation's completion notice goes to the client that elicitation was sent to,
  and nowhere if the proxy did not send it.
- List-changed and resource-updated notices go to every client: as notifications to
  handshake-era clients (resource updates only to those that subscribed to the resource), and as
  events on `subscriptions/listen` streams to 2026-era clients.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import anyio

from planfence.shared_memory.extras import extra_imports

with extra_imports("mcp", "the MCP proxy"):
    import mcp  # noqa: F401  (the `mcp` extra)

import mcp_types as types
from mcp.client.session import ClientRequestContext
from mcp.server.connection import allowed_log_levels
from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    PromptsListChanged,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    ToolsListChanged,
)
from mcp.server.validation import wants_sampling_tools
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
from pydantic import TypeAdapter, ValidationError

from .peers import (
    DEFAULT_LEGACY_LOG_LEVEL,
    ORIGIN,
    Origin,
    Peer,
    is_modern,
    levels_from,
)

logger = logging.getLogger("planfence.mcp")

# The error a handshake-era upstream gets instead of the client's answer when the call that
# asked is no longer allowed by the gate.
REVOKED_MESSAGE = "planfence: the call is no longer allowed (its plan went stale); answer withheld"

_CAPABILITY_NAMES = {
    "sampling/createMessage": "Sampling",
    "elicitation/create": "Elicitation",
    "roots/list": "List roots",
}


def _unsupported(method: str) -> types.ErrorData:
    # The answer the official client SDK gives when the capability is missing.
    name = _CAPABILITY_NAMES.get(method, method)
    return types.ErrorData(code=types.INVALID_REQUEST, message=f"{name} not supported")


def _required_capability(request: types.InputRequest) -> types.ClientCapabilities:
    if isinstance(request, types.CreateMessageRequest):
        p = request.params
        with_tools = wants_sampling_tools(p.tools, p.tool_choice)
        tools = types.SamplingToolsCapability() if with_tools else None
        return types.ClientCapabilities(sampling=types.SamplingCapability(tools=tools))
    if isinstance(request, types.ElicitRequest):
        return types.ClientCapabilities(elicitation=types.ElicitationCapability())
    return types.ClientCapabilities(roots=types.RootsCapability())


_RESULT_TYPES: dict[str, Any] = {
    "elicitation/create": types.ElicitResult,
    "roots/list": types.ListRootsResult,
}


class Relay:
    """Tracks the proxy's clients and their forwarded requests, and delivers upstream messages."""

    def __init__(self, ask_timeout: float | None = None, *, single_client: bool = False) -> None:
        # Seconds a client gets to answer one upstream question (None: no limit).
        self.ask_timeout = ask_timeout
        # A stdio front has exactly one client: the upstream's requests made outside any
        # forwarded request go to it.
        self.single_client = single_client
        # Set once the first client's era is known (a handshake-era client: its handshake done).
        self._first_client = anyio.Event()
        self._peers: dict[int, tuple[Any, Peer]] = {}
        self._in_flight: dict[int, Origin] = {}
        # URL-mode elicitations by id: the client each went to, which alone gets its completion.
        self._url_elicitations: dict[str, Peer] = {}
        # 2026-era clients' `subscriptions/listen` streams read change events from here.
        self.bus = InMemorySubscriptionBus()
        # Called with a client connection that closed (the proxy releases its subscriptions).
        self.on_forget: Callable[[Peer], None] | None = None

    # -- clients and their requests -------------------------------------------------------------

    def peer(self, ctx: ServerRequestContext[Any]) -> Peer:
        """The client connection a request arrived on (registered for notices if it has a
        connection-wide channel, i.e. speaks the handshake era)."""
        session = ctx.session
        if is_modern(ctx.protocol_version):
            # Each 2026-era request stands alone: notices reach these clients on listen streams.
            self._first_client.set()
            return Peer(session, ctx.protocol_version)
        connection = getattr(session, "_connection", None) or session
        key = id(connection)
        known = self._peers.get(key)
        if known is not None and known[0] is connection:
            peer = known[1]
            peer.session = session
            peer.protocol_version = ctx.protocol_version
            return peer
        peer = Peer(session, ctx.protocol_version)
        self._peers[key] = (connection, peer)
        stack = getattr(connection, "exit_stack", None)
        if stack is not None:
            stack.callback(self._forget, key, connection)
        self._first_client.set()
        return peer

    async def client_initialized(self, ctx: ServerRequestContext[Any], params: Any) -> None:
        """A client finished its handshake (`notifications/initialized`): from now on it can be
        asked the upstream's questions."""
        self.peer(ctx)

    async def _only_client(self) -> Peer | None:
        """The proxy's one client (a stdio front), waiting for its handshake; None when the
        proxy may have several clients, or its client cannot be asked (a 2026-era client)."""
        if not self.single_client:
            return None
        try:
            with anyio.fail_after(self.ask_timeout):
                await self._first_client.wait()
        except TimeoutError:
            return None
        peers = self.peers()
        return peers[0] if len(peers) == 1 else None

    def _forget(self, key: int, connection: Any) -> None:
        known = self._peers.get(key)
        if known is not None and known[0] is connection:
            del self._peers[key]
            gone = known[1]
            for elicitation, peer in list(self._url_elicitations.items()):
                if peer is gone:
                    del self._url_elicitations[elicitation]
            if self.on_forget is not None:
                self.on_forget(gone)

    def peers(self) -> list[Peer]:
        return [peer for _, peer in self._peers.values()]

    @contextmanager
    def forwarding(
        self,
        ctx: ServerRequestContext[Any],
        recheck: Callable[[], Awaitable[bool]] | None = None,
        fence: Callable[[], Mapping[str, Any] | None] | None = None,
    ) -> Iterator[Origin]:
        """Mark a client request as being forwarded upstream, for the duration of the block."""
        origin = Origin(ctx, self.peer(ctx), recheck, fence)
        key = id(origin)
        self._in_flight[key] = origin
        token = ORIGIN.set(origin)
        try:
            yield origin
        finally:
            ORIGIN.reset(token)
            self._in_flight.pop(key, None)

    def current_origin(self) -> Origin | None:
        """The client request an upstream message belongs to, or None if that cannot be told.

        When the message is known to belong to one request (it arrived in that request's
        context, as over a streamable-HTTP upstream) and that request has finished, the answer
        is None: another client's request in flight is never a stand-in for it.
        """
        origin = ORIGIN.get()
        if origin is not None:
            return origin if self._in_flight.get(id(origin)) is origin else None
        live = list(self._in_flight.values())
        if not live:
            return None
        last = live[-1]
        if all(o.peer is last.peer for o in live):
            return last
        return None

    # -- requests from the upstream -------------------------------------------------------------

    async def ask(self, origin: Origin | None, request: types.InputRequest) -> Any:
        """Put one upstream question to the client; its result, or the error to answer with."""
        related: types.RequestId | None = None
        if origin is not None:
            peer, session, related = origin.peer, origin.ctx.session, origin.ctx.request_id
        else:
            only = await self._only_client()
            if only is None:
                logger.warning(
                    "%s from the upstream matches no single client request; refused",
                    request.method,
                )
                return _unsupported(request.method)
            peer, session = only, only.session  # outside any request, on the connection
        if peer.modern or not session.check_client_capability(_required_capability(request)):
            return _unsupported(request.method)
        if isinstance(request, types.CreateMessageRequest):
            p = request.params
            result_type: Any = (
                types.CreateMessageResultWithTools
                if wants_sampling_tools(p.tools, p.tool_choice)
                else types.CreateMessageResult
            )
        else:
            result_type = _RESULT_TYPES[request.method]
        if (
            isinstance(request, types.ElicitRequest)
            and isinstance(request.params, types.ElicitRequestURLParams)
            and request.params.elicitation_id is not None
        ):
            self._remember_url_elicitation(request.params.elicitation_id, peer)
        metadata = None if related is None else ServerMessageMetadata(related_request_id=related)
        try:
            with anyio.fail_after(self.ask_timeout):
                return await session.send_request(request, result_type, metadata=metadata)
        except TimeoutError:
            return types.ErrorData(
                code=REQUEST_TIMEOUT,
                message=f"the client did not answer {request.method} in {self.ask_timeout} s",
            )
        except MCPError as exc:
            return exc.error
        except ValidationError:
            return types.ErrorData(
                code=types.INTERNAL_ERROR, message="the client answered with an invalid result"
            )
        except Exception as exc:  # the client went away mid-question, or its transport failed
            logger.debug("could not ask the client %s", request.method, exc_info=True)
            return types.ErrorData(
                code=CONNECTION_CLOSED,
                message=f"could not ask the client {request.method}: {type(exc).__name__}",
            )

    async def ask_mid_call(self, request: types.InputRequest) -> Any:
        """A handshake-era upstream's question asked while it serves a forwarded request.

        The client may take long to answer (a human reading an elicitation), and the plan that
        authorised a gated call may go stale meanwhile: the call is judged again once the client
        has answered, and if it is no longer allowed the upstream gets an error instead of the
        answer, so the tool does not go on with it. (An error, not an elicitation "cancel": a
        cancel is an ordinary user choice a tool may carry on past, and sampling and roots have
        no such answer.) The proxy then returns the refusal, not the upstream's result.
        """
        origin = self.current_origin()
        answer = await self.ask(origin, request)
        if (
            origin is not None
            and origin.recheck is not None
            and not isinstance(answer, types.ErrorData)
            and not await origin.recheck()
        ):
            return types.ErrorData(code=types.INVALID_REQUEST, message=REVOKED_MESSAGE)
        return answer

    async def on_sampling(
        self, context: ClientRequestContext, params: types.CreateMessageRequestParams
    ) -> Any:
        return await self.ask_mid_call(types.CreateMessageRequest(params=params))

    async def on_elicitation(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> Any:
        return await self.ask_mid_call(types.ElicitRequest(params=params))

    async def on_list_roots(self, context: ClientRequestContext) -> Any:
        return await self.ask_mid_call(types.ListRootsRequest())

    async def answer_input_requests(
        self, origin: Origin, requests: Mapping[str, Any]
    ) -> dict[str, Any] | types.ErrorData:
        """Answers to a 2026-era upstream's `inputRequests`, asked of a handshake-era client:
        the `inputResponses` to retry with, or the first refusal."""
        parsed: dict[str, types.InputRequest] = {}
        for key, raw in requests.items():
            try:
                parsed[key] = _INPUT_REQUEST.validate_python(raw)
            except ValidationError:
                return types.ErrorData(
                    code=types.INVALID_PARAMS, message=f"malformed input request {key!r}"
                )
        answers: dict[str, Any] = {}
        refused: list[types.ErrorData] = []

        async def one(key: str, request: types.InputRequest, scope: anyio.CancelScope) -> None:
            answer = await self.ask(origin, request)
            if isinstance(answer, types.ErrorData):
                refused.append(answer)
                scope.cancel()
            else:
                answers[key] = answer.model_dump(by_alias=True, mode="json", exclude_none=True)

        async with anyio.create_task_group() as tg:
            for key, request in parsed.items():
                tg.start_soon(one, key, request, tg.cancel_scope)
        return refused[0] if refused else answers

    # -- notifications from the upstream --------------------------------------------------------

    def _remember_url_elicitation(self, elicitation_id: str, peer: Peer) -> None:
        if len(self._url_elicitations) >= _MAX_URL_ELICITATIONS:
            # Completions that never came: forget the oldest rather than grow without bound.
            del self._url_elicitations[next(iter(self._url_elicitations))]
        self._url_elicitations[elicitation_id] = peer

    def _connected(self, peer: Peer) -> bool:
        return any(p is peer for p in self.peers())

    async def on_log(self, params: types.LoggingMessageNotificationParams) -> None:
        origin = self.current_origin()
        notice = types.LoggingMessageNotification(params=params)
        if origin is not None:
            if params.level in self._log_levels(origin):
                await self._notify(origin.ctx.session, notice, origin.ctx.request_id)
            return
        finished = ORIGIN.get()
        if finished is not None:
            # Its request is over: to the same client, no longer tied to the request (only a
            # handshake-era client still connected has a channel for that), or nowhere.
            peer = finished.peer
            level = peer.log_level or DEFAULT_LEGACY_LOG_LEVEL
            if not peer.modern and self._connected(peer) and params.level in levels_from(level):
                await self._notify(peer.session, notice)
            return
        if self._in_flight:
            logger.debug("log message from the upstream matches no single client; dropped")
            return
        for peer in self.peers():
            if params.level in levels_from(peer.log_level or DEFAULT_LEGACY_LOG_LEVEL):
                await self._notify(peer.session, notice)

    def _log_levels(self, origin: Origin) -> frozenset[types.LoggingLevel]:
        if origin.peer.modern:
            return allowed_log_levels(origin.ctx.protocol_version, origin.ctx.meta)
        return levels_from(origin.peer.log_level or DEFAULT_LEGACY_LOG_LEVEL)

    async def on_notification(self, message: Any) -> None:
        """The upstream session's message handler: change notices and elicitation completions."""
        if isinstance(message, types.ToolListChangedNotification):
            await self.publish(ToolsListChanged())
        elif isinstance(message, types.PromptListChangedNotification):
            await self.publish(PromptsListChanged())
        elif isinstance(message, types.ResourceListChangedNotification):
            await self.publish(ResourcesListChanged())
        elif isinstance(message, types.ResourceUpdatedNotification):
            await self.publish(ResourceUpdated(uri=message.params.uri))
        elif isinstance(message, types.ElicitCompleteNotification):
            # Only the client the URL elicitation went to; an unknown one goes nowhere.
            peer = self._url_elicitations.pop(message.params.elicitation_id, None)
            if peer is not None and not peer.modern and self._connected(peer):
                await self._notify(peer.session, message)

    async def publish(self, event: ServerEvent) -> None:
        """Deliver a change notice to every client."""
        notice = _LEGACY_NOTICES.get(type(event))
        for peer in self.peers():
            if isinstance(event, ResourceUpdated):
                if event.uri in peer.subscriptions:
                    await self._notify(
                        peer.session,
                        types.ResourceUpdatedNotification(
                            params=types.ResourceUpdatedNotificationParams(uri=event.uri)
                        ),
                    )
            elif notice is not None:
                await self._notify(peer.session, notice)
        await self.bus.publish(event)

    async def _notify(
        self, session: Any, notice: Any, related_request_id: types.RequestId | None = None
    ) -> None:
        try:
            await session.send_notification(notice, related_request_id)
        except Exception:  # a client that went away must not stop delivery to the others
            logger.debug("could not deliver %s to a client", type(notice).__name__, exc_info=True)


_MAX_URL_ELICITATIONS = 1024

_INPUT_REQUEST: TypeAdapter[types.InputRequest] = TypeAdapter(types.InputRequest)

_LEGACY_NOTICES: dict[type, Any] = {
    ToolsListChanged: types.ToolListChangedNotification(),
    PromptsListChanged: types.PromptListChangedNotification(),
    ResourcesListChanged: types.ResourceListChangedNotification(),
}
