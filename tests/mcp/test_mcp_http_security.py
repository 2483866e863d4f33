"""The proxy's HTTP front, tested with real HTTP requests to a `planfence proxy` process:
Origin and Host checks against DNS rebinding, the optional bearer token, loopback by default."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from mcp_helpers import World, background, free_port, wait_for_port

from planfence.adapters.mcp.cli import add_parser
from planfence.adapters.mcp.http_guard import TOKEN_ENV, HttpGuard, is_loopback

MCP_PAGE = Path(__file__).resolve().parents[2] / "docs" / "frameworks" / "mcp.md"
TOKEN = "s3cret-token-for-tests"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "http-test", "version": "1"},
    },
}
MCP_HEADERS = {"accept": "application/json, text/event-stream"}


@asynccontextmanager
async def proxy(world: World, tmp_path: Path, *options: str) -> AsyncIterator[str]:
    port = free_port()
    args = world.proxy_args("--transport", "http", "--port", str(port), *options)
    args += ["--", *world.upstream_command()]
    async with background([sys.executable, *args], tmp_path / "proxy.log"):
        await wait_for_port(port)
        yield f"http://127.0.0.1:{port}"


async def post(base: str, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.post(
            f"{base}/mcp", json=INITIALIZE, headers={**MCP_HEADERS, **headers}, timeout=30
        )


async def test_a_token_is_required_and_a_wrong_one_is_told_nothing(
    world: World, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    async with proxy(world, tmp_path, "--auth-token-file", str(token_file)) as base:
        answers = [
            await post(base),
            await post(base, authorization="Bearer wrong"),
            await post(base, authorization=f"Bearer {TOKEN}x"),
            await post(base, authorization=f"Basic {TOKEN}"),
        ]
        for answer in answers:
            assert answer.status_code == 401
            assert answer.content == b""  # no detail: missing and wrong look the same
            assert answer.headers["www-authenticate"] == "Bearer"
        ok = await post(base, authorization=f"Bearer {TOKEN}")
        assert ok.status_code == 200
        assert "planfence" in ok.text  # the proxy's initialize answer


async def test_the_token_can_come_from_the_environment(
    world: World, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)  # the proxy process inherits it
    async with proxy(world, tmp_path) as base:
        assert (await post(base)).status_code == 401
        assert (await post(base, authorization=f"Bearer {TOKEN}")).status_code == 200


async def test_origins_and_hosts_of_other_sites_are_refused(world: World, tmp_path: Path) -> None:
    async with proxy(world, tmp_path, "--allow-origin", "https://app.example.com") as base:
        port = base.rsplit(":", 1)[1]
        # A page on another site, or the same site renamed by DNS rebinding, is refused.
        assert (await post(base, origin="http://evil.example")).status_code == 403
        assert (await post(base, origin=f"http://evil.example:{port}")).status_code == 403
        assert (await post(base, origin="null")).status_code == 403
        assert (await post(base, host=f"evil.example:{port}")).status_code == 421
        # Clients that are not browsers send no Origin; loopback pages and allowed ones pass.
        assert (await post(base)).status_code == 200
        assert (await post(base, origin=f"http://localhost:{port}")).status_code == 200
        assert (await post(base, origin="http://127.0.0.1:3000")).status_code == 200
        assert (await post(base, origin="https://app.example.com")).status_code == 200
        assert (await post(base, host=f"localhost:{port}")).status_code == 200


def test_loopback_is_the_default_bind() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    args = parser.parse_args(["proxy", "--policy", "p.toml", "--", "server"])
    assert args.host == "127.0.0.1"
    assert is_loopback(args.host)
    assert args.auth_token_file is None and args.allow_origin == []


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.0.1", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("192.168.1.4", False),
        ("localhost.evil.example", False),
    ],
)
def test_loopback_names(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_allowed_origins_are_compared_normalised() -> None:
    async def app(scope: object, receive: object, send: object) -> None:
        raise AssertionError("not called")

    guard = HttpGuard(app, allowed_origins=["HTTPS://App.Example.com:443/"])
    assert guard.origin_allowed("https://app.example.com")
    assert not guard.origin_allowed("http://app.example.com")
    assert guard.origin_allowed("http://[::1]:8808")
    assert not guard.origin_allowed("https://app.example.com.evil.example")
    assert not guard.origin_allowed("file://")


async def test_a_body_over_the_documented_limit_gets_413(world: World, tmp_path: Path) -> None:
    from mcp.server.streamable_http_manager import DEFAULT_MAX_REQUEST_BODY_SIZE

    said = " ".join(MCP_PAGE.read_text(encoding="utf-8").split())
    assert DEFAULT_MAX_REQUEST_BODY_SIZE == 4 * 1024 * 1024
    assert "A request body over 4 MiB is answered 413 (`Request body too large`)" in said
    padding = {"jsonrpc": "2.0", "id": 2, "method": "ping", "params": {"pad": ""}}
    overhead = len(httpx.Request("POST", "http://x", json=padding).content)

    def body(size: int) -> bytes:
        pad = "x" * (size - overhead)
        return httpx.Request("POST", "http://x", json={**padding, "params": {"pad": pad}}).content

    async with proxy(world, tmp_path) as base, httpx.AsyncClient() as http:
        headers = {**MCP_HEADERS, "content-type": "application/json"}
        over = await http.post(
            f"{base}/mcp", content=body(DEFAULT_MAX_REQUEST_BODY_SIZE + 1), headers=headers
        )
        assert (over.status_code, over.text) == (413, "Request body too large")
        at = await http.post(
            f"{base}/mcp", content=body(DEFAULT_MAX_REQUEST_BODY_SIZE), headers=headers, timeout=30
        )
        assert at.status_code != 413
