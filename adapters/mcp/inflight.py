"""The clients' requests in flight upstream: each under an id (and progress token) that no
other request in flight has, with a timer, until the upstream answers, fails, or the client
cancels; the answer goes back to its client as it came, with its id (and era) restored.

A request forwarded as it came is answered from the upstream's reader (`respond`), with no task
of its own; a handler that waits for the answer (a gated call that must be judged again, a
request bridged between eras) sends it with `roundtrip`, and a gated call answered at once with
its `Call.finish`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from . import bridge
from . import jsonrpc as rpc
from .links import UPSTREAM_TIMEOUT, UpstreamFailure
from .peers import Call

if TYPE_CHECKING:
    from .proxy import PlanfenceProxy


class InFlight:
    """The requests the proxy has in flight upstream for its clients."""

    def __init__(self, proxy: PlanfenceProxy) -> None:
        self.proxy = proxy
        self.upstream = proxy.upstream
        self.tokens: dict[Any, Call] = {}  # progress tokens upstream -> their request
        self._token_ids = 0

    def forward(self, call: Call, message: dict[str, Any], raw: bytes | None) -> None:
        """Forward a client's request as it came (its envelope changed only between eras)."""
        upstream = self.upstream
        if call.method == "ping" and (upstream.modern or call.modern):
            call.reply({})  # the 2026 protocol has no ping: nothing to ask the upstream
            return
        if call.method == "tools/list":
            call.note = "cursor" not in rpc.params_of(message)  # the first page
        if call.modern != upstream.modern:
            message, raw = bridge.to_upstream(message, call.modern, call.peer, upstream), None
            if not call.modern and call.method in rpc.INPUT_REQUIRED:
                call.task = self.proxy.spawn(self._bridged(call, message))
                return
        if not upstream.alive:
            call.task = self.proxy.spawn(self._reconnected(call, message))
            return
        try:
            self.send(call, message, raw, self.timeout(call))
        except UpstreamFailure as exc:
            self.lost(call, exc)

    async def _reconnected(self, call: Call, message: dict[str, Any]) -> None:
        try:
            await self.upstream.ensure()
            self.send(call, message, None, self.timeout(call))
        except UpstreamFailure as exc:
            self.lost(call, exc)

    async def _bridged(self, call: Call, message: dict[str, Any]) -> None:
        """A handshake-era client's request to a 2026-era upstream that may ask for input."""
        try:
            got = await bridge.exchange(self.proxy, call, message, self.timeout(call))
        except bridge.InputRefused as exc:
            call.answer(rpc.error(call.id, **exc.error))
            return
        except UpstreamFailure as exc:
            call.fail(rpc.INTERNAL_ERROR, str(exc))
            return
        self.respond(call, got, None)

    def timeout(self, call: Call) -> float | None:
        """How long the upstream may take: a task's result comes when its tool call ends."""
        upstream = self.upstream
        return upstream.call_timeout if call.method == "tasks/result" else upstream.request_timeout

    def send(
        self, call: Call, message: dict[str, Any], raw: bytes | None, timeout: float | None
    ) -> None:
        """Put a client's request in flight upstream, under an id (and progress token) no
        other request in flight has."""
        upstream = self.upstream
        call.upstream_id = upstream_id = upstream.register(call, call.id)
        token = self._token(call, message)
        if upstream_id != call.id or token is not None:
            params = rpc.params_of(message)
            if token is not None:
                params = {**params, "_meta": {**rpc.meta_of(params), "progressToken": token}}
            message, raw = {**message, "id": upstream_id, "params": params}, None
        if timeout is not None and call.waiter is None:
            loop = asyncio.get_running_loop()
            call.timer = loop.call_later(timeout, self._timed_out, call, timeout)
        try:
            upstream.send(message, raw, call)
        except UpstreamFailure:
            upstream.pending.pop(upstream_id, None)
            self.settle(call)
            raise

    def _token(self, call: Call, message: dict[str, Any]) -> Any:
        """Register the request's progress token; the token it takes upstream when another
        request in flight has the same one (else None)."""
        params = message.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        if not rpc.valid_id(token):
            return None
        call.token = token
        upstream_token = token
        while upstream_token in self.tokens:
            self._token_ids += 1
            upstream_token = f"planfence-progress-{self._token_ids}"
        call.upstream_token = upstream_token
        self.tokens[upstream_token] = call
        return upstream_token if upstream_token != token else None

    def settle(self, call: Call) -> None:
        """The request is no longer in flight upstream."""
        if call.timer is not None:
            call.timer.cancel()
            call.timer = None
        if call.upstream_token is not None and self.tokens.get(call.upstream_token) is call:
            del self.tokens[call.upstream_token]

    async def roundtrip(
        self, call: Call, message: dict[str, Any], timeout: float | None
    ) -> dict[str, Any]:
        """Send a request upstream for a handler that waits for the answer.

        Raises:
            UpstreamFailure: the upstream is gone or did not answer in `timeout` seconds.
        """
        upstream = self.upstream
        await upstream.ensure()
        waiter = call.waiter = asyncio.get_running_loop().create_future()
        try:
            self.send(call, message, None, None)
            return await asyncio.wait_for(waiter, timeout)
        except TimeoutError:
            text = f"the upstream server did not answer {call.method} in {timeout} s"
            raise UpstreamFailure(UPSTREAM_TIMEOUT, text) from None
        finally:
            call.waiter = None
            if upstream.pending.get(call.upstream_id) is call:
                upstream.cancel(call.upstream_id, "abandoned")
            self.settle(call)

    def answered(self, call: Call, message: dict[str, Any], raw: bytes | None) -> None:
        """The upstream's answer to a client's request."""
        self.settle(call)
        waiter = call.waiter
        if waiter is not None:
            if not waiter.done():
                waiter.set_result(message)
        elif call.finish is not None:
            call.finish(message, None)
        else:
            self.respond(call, message, raw)

    def respond(self, call: Call, message: dict[str, Any], raw: bytes | None) -> None:
        result = message.get("result")
        if isinstance(result, dict):
            if call.method == "tools/list":
                self.proxy.catalog.observe(result)
                if self.proxy.sessions is not None and call.note:
                    tools = [*(result.get("tools") or ()), *self.proxy.sessions.tools()]
                    result, raw = {**result, "tools": tools}, None
            shaped = bridge.to_client(result, call.method, call.modern, self.upstream)
            if shaped is not result or raw is None or call.upstream_id != call.id:
                call.answer(rpc.result(call.id, shaped))
                return
        elif raw is None or call.upstream_id != call.id:
            call.answer({**message, "id": call.id})
            return
        call.answer(message, raw)

    def _timed_out(self, call: Call, timeout: float) -> None:
        call.timer = None
        if self.upstream.pending.get(call.upstream_id) is call:
            self.upstream.cancel(call.upstream_id, "timed out")
        self.settle(call)
        text = f"the upstream server did not answer {call.method} in {timeout} s"
        if call.finish is not None:
            call.finish(None, UpstreamFailure(UPSTREAM_TIMEOUT, text))
        else:
            call.fail(rpc.REQUEST_TIMEOUT, text)

    def lost(self, call: Call, failure: UpstreamFailure) -> None:
        self.settle(call)
        waiter = call.waiter
        if waiter is not None:
            if not waiter.done():
                waiter.set_exception(failure)
        elif call.finish is not None:
            call.finish(None, failure)
        else:
            call.fail(rpc.INTERNAL_ERROR, str(failure))

    def abandon(
        self, call: Call, reason: str, notice: dict[str, Any] | None, raw: bytes | None
    ) -> None:
        """The client cancelled a request forwarded as it came: cancelled upstream too."""
        self.settle(call)
        if self.upstream.pending.get(call.upstream_id) is call:
            same = call.upstream_id == call.id and call.modern == self.upstream.modern
            self.upstream.cancel(call.upstream_id, reason, notice if same else None, raw)
