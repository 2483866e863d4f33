"""Helpers for the MCP proxy tests: a store with one owned key and a plan, a policy file, the
test upstream server, and `planfence proxy` started as a real subprocess."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from planfence.plugins.gate import create_plan
from planfence.shared_memory import AsyncStore, Record, open_async_store

HERE = Path(__file__).parent
UPSTREAM = str(HERE / "upstream_server.py")
TRIP_KEY = "trip/t1/requirements"

POLICY = """
[tools.book]
depends_on = ["trip/{trip}/requirements"]

[tools.echo]
ungated = true

[tools.slow]
ungated = true

[tools.wait_forever]
ungated = true

[tools.hang]
ungated = true

[tools.crash]
ungated = true

[tools.fail]
ungated = true

[tools.ask]
ungated = true

[tools.compose]
ungated = true

[tools.client_roots]
ungated = true

[tools.chatty]
ungated = true

[tools.grow]
ungated = true

[tools.touch]
ungated = true

[tools.route]
ungated = true

[tools.complete]
ungated = true

# declared, but the upstream has no such tool
[tools.ghost]
ungated = true

# `ship` is deliberately not declared
"""


async def make_world(tmp_path: Path) -> World:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = await open_async_store(url)
    try:
        await store.own(TRIP_KEY, "planner")
        first = await store.put(TRIP_KEY, {"destination": "Lisbon"}, author="planner")
        plan = await create_plan(store, author="planner", parents=[first.id], value={"go": 1})
    except BaseException:
        await store.aclose()
        raise
    policy = tmp_path / "policy.toml"
    policy.write_text(POLICY)
    return World(store, url, policy, tmp_path / "effects.jsonl", first, plan)


@dataclass
class World:
    """One test's shared state: the store file the proxy uses, its first plan, the effects file."""

    store: AsyncStore
    store_url: str
    policy: Path
    effects: Path
    first: Record
    plan: Record

    def effects_log(self, event: str | None = None) -> list[dict[str, Any]]:
        if not self.effects.exists():
            return []
        rows = [json.loads(line) for line in self.effects.read_text().splitlines() if line]
        return [r for r in rows if event is None or r["event"] == event]

    async def revise(self, value: Any) -> Record:
        """The planner commits a new version of the trip requirements (the head moves)."""
        return await self.store.put(TRIP_KEY, value, author="planner")

    async def replan(self, parents: list[str], supersedes: str | None) -> Record:
        return await create_plan(
            self.store,
            author="planner",
            parents=parents,
            value={"n": parents},
            supersedes=supersedes,
        )

    def upstream_command(self, *extra: str) -> list[str]:
        return [sys.executable, UPSTREAM, "--effects", str(self.effects), *extra]

    def proxy_args(self, *options: str, upstream: list[str] | None = None) -> list[str]:
        args = ["-m", "planfence.adapters.cli", "proxy", "--policy", str(self.policy)]
        args += ["--store", self.store_url, *options]
        if upstream is not None:
            args += ["--", *upstream]
        return args

    def proxy_params(
        self, *options: str, upstream: list[str] | None = None
    ) -> StdioServerParameters:
        return StdioServerParameters(
            command=sys.executable,
            args=self.proxy_args(
                *options, upstream=self.upstream_command() if upstream is None else upstream
            ),
            env=dict(os.environ),
        )


@asynccontextmanager
async def connect(
    params: StdioServerParameters | str, mode: str = "auto", **kwargs: Any
) -> AsyncIterator[Client]:
    """An official MCP client connected to the proxy (a subprocess or an HTTP URL)."""
    async with Client(params, mode=mode, cache=None, read_timeout_seconds=60, **kwargs) as client:
        yield client


def plan_meta(plan: str | Record | None, **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = dict(extra)
    if plan is not None:
        meta["dev.planfence/plan"] = plan if isinstance(plan, str) else plan.id
    return meta


def refusal(result: Any) -> dict[str, Any]:
    """The planfence body of a refused call, after checking it has the documented shape: the
    same object as text and in `_meta`, and as structured content only for a tool without an
    output schema."""
    assert result.is_error is True
    payload = json.loads(result.content[0].text)
    assert result.meta["dev.planfence/refusal"] == payload
    assert result.structured_content in (None, payload)
    return dict(payload["planfence"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_for(predicate: Callable[[], bool], what: str, limit: float = 30.0) -> None:
    """Poll until `predicate()` holds; fails (not a timing assertion: a generous bound) if never."""
    with anyio.fail_after(limit):
        while not predicate():  # noqa: ASYNC110  (another process writes what we poll)
            await anyio.sleep(0.05)


async def wait_for_port(port: int, limit: float = 30.0) -> None:
    with anyio.fail_after(limit):
        while True:
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.1)
            else:
                await stream.aclose()
                return


@asynccontextmanager
async def background(args: list[str], log: Path) -> AsyncIterator[anyio.abc.Process]:
    """A long-running process (an HTTP server), stopped and reaped on exit."""
    with log.open("wb") as err:
        proc = await anyio.open_process(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err
        )
        try:
            yield proc
        finally:
            if proc.returncode is None:
                proc.terminate()
                with anyio.move_on_after(10):
                    await proc.wait()
            if proc.returncode is None:
                proc.kill()
            await proc.aclose()


@asynccontextmanager
async def http_proxy(world: World, tmp_path: Path, *options: str) -> AsyncIterator[str]:
    port = free_port()
    args = [sys.executable, *world.proxy_args("--transport", "http", "--port", str(port), *options)]
    if "--upstream-url" not in options:
        args += ["--", *world.upstream_command()]
    async with background(args, tmp_path / "proxy.log"):
        await wait_for_port(port)
        yield f"http://127.0.0.1:{port}/mcp"
