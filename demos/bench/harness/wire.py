"""Bytes on the wire for the benchmarks' owner traffic: a counting httpx transport.

`CountedOwnerHeads` is `HttpOwnerHeads` over a client whose transport counts what crosses it, so
the product's head source stays free of measurement code. Sizes are those of HTTP/1.1 messages:
request or status line, headers, blank line, body.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

import httpx

from planfence.adapters.owner_service import HttpOwnerHeads, SigningKey
from planfence.adapters.owner_service.wire import Verifier
from planfence.plugins.gate.decision import HeadAnswer


@dataclass
class WireStats:
    requests: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0

    @property
    def total_bytes(self) -> int:
        return self.bytes_sent + self.bytes_received


def request_size(request: httpx.Request, body_len: int) -> int:
    line = len(request.method) + 1 + len(request.url.raw_path) + len(b" HTTP/1.1\r\n")
    headers = sum(len(k) + len(v) + 4 for k, v in request.headers.raw)
    return line + headers + 2 + body_len


def response_head_size(response: httpx.Response) -> int:
    line = len(b"HTTP/1.1 200 \r\n") + len(response.reason_phrase)
    return line + sum(len(k) + len(v) + 4 for k, v in response.headers.raw) + 2


class _CountedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, stats: WireStats) -> None:
        self.inner = inner
        self.stats = stats

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.stats.bytes_received += len(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


class CountingTransport(httpx.AsyncBaseTransport):
    """Counts requests and HTTP/1.1 bytes each way through `inner` (default: plain HTTP)."""

    def __init__(self, inner: httpx.AsyncBaseTransport | None = None) -> None:
        self.inner = inner or httpx.AsyncHTTPTransport()
        self.stats = WireStats()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = await request.aread()
        response = await self.inner.handle_async_request(request)
        self.stats.requests += 1
        self.stats.bytes_sent += request_size(request, len(body))
        self.stats.bytes_received += response_head_size(response)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _CountedStream(response.stream, self.stats)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class CountedOwnerHeads:
    """`HttpOwnerHeads` whose traffic is counted in `stats` (a `HeadSource`)."""

    def __init__(
        self,
        directory: Mapping[str, str],
        keyring: Verifier,
        *,
        agent: str,
        timeout: float,
        limits: httpx.Limits | None = None,
        signing_key: SigningKey | None = None,
    ) -> None:
        self.transport = CountingTransport(
            httpx.AsyncHTTPTransport(limits=limits) if limits else None
        )
        self.stats = self.transport.stats
        self._client = httpx.AsyncClient(transport=self.transport, timeout=timeout)
        self.http = HttpOwnerHeads(
            directory,
            keyring,
            agent=agent,
            timeout=timeout,
            client=self._client,
            signing_key=signing_key,
        )

    async def heads(self, owners: Mapping[str, tuple[str, ...]]) -> Mapping[str, HeadAnswer]:
        return await self.http.heads(owners)

    async def aclose(self) -> None:
        await self._client.aclose()
