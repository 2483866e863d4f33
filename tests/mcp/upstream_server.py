"""A small MCP server that the proxy tests put behind `planfence proxy`.

Every tool that has an effect appends one JSON line to the effects file (``--effects`` or
$PLANFENCE_TEST_EFFECTS), so a test can prove that a refused call never ran. Run it as a script:

    python tests/mcp/upstream_server.py --effects /tmp/effects.jsonl            # stdio, both eras
    python tests/mcp/upstream_server.py --legacy-only                           # handshake era only
    python tests/mcp/upstream_server.py --transport http --port 8765            # streamable HTTP
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

EFFECTS_ENV = "PLANFENCE_TEST_EFFECTS"


class Booking(BaseModel):
    """The structured result of `book`: the tool declares an output schema."""

    booking: str
    destination: str


def build(effects: Path | None) -> MCPServer:
    server = MCPServer("planfence-test-upstream", version="1.0.0", instructions="test upstream")

    def record(event: str, ctx: Context | None = None, **fields: Any) -> None:
        if effects is None:
            return
        entry: dict[str, Any] = {"event": event, **fields}
        if ctx is not None:
            rc = ctx.request_context
            entry["protocol_version"] = rc.protocol_version
            entry["meta"] = dict(rc.meta or {})
        with effects.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
            f.flush()

    @server.tool(description="Return the text unchanged (no side effect).")
    def echo(text: str) -> str:
        return text

    @server.tool(description="Book a trip: records the booking as a side effect.")
    def book(destination: str, trip: str, ctx: Context) -> Booking:
        record("book", ctx, destination=destination, trip=trip)
        return Booking(booking=f"{trip}-{destination}", destination=destination)

    @server.tool(description="Ship an order: records the shipment as a side effect.")
    def ship(order_id: str, ctx: Context) -> str:
        record("ship", ctx, order_id=order_id)
        return f"shipped {order_id}"

    @server.tool(description="Work in steps, reporting progress after each.")
    async def slow(steps: int, ctx: Context) -> str:
        for i in range(steps):
            await ctx.report_progress(i + 1, steps, f"step {i + 1}")
            await anyio.sleep(0.05)
        record("slow_done", ctx, steps=steps)
        return f"done {steps}"

    @server.tool(description="Block until cancelled; records start and cancellation.")
    async def wait_forever(tag: str, ctx: Context) -> str:
        record("wait_started", ctx, tag=tag)
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            record("wait_cancelled", tag=tag)
            raise
        return "unreachable"

    @server.tool(description="Hang without ever answering (ignores cancellation politely).")
    async def hang(tag: str) -> str:
        record("hang_started", tag=tag)
        await anyio.sleep(3600)
        return "unreachable"

    @server.tool(description="Kill this server process mid-call.")
    def crash(tag: str) -> str:
        record("crash", tag=tag)
        sys.stdout.flush()
        os._exit(3)

    @server.tool(description="Raise an error from the tool.")
    def fail(tag: str) -> str:
        raise ToolError(f"tool failed on purpose: {tag}")

    @server.resource("test://greeting", description="A static resource.")
    def greeting() -> str:
        return "hello from upstream"

    @server.prompt(description="A prompt with one argument.")
    def plan_trip(city: str) -> str:
        return f"Plan a trip to {city}."

    record("started", pid=os.getpid(), at=time.time())
    return server


async def _serve_legacy_stdio(server: MCPServer) -> None:
    """Serve the initialize handshake only, as servers built on older SDKs do."""
    from mcp.server.runner import serve_loop
    from mcp.server.stdio import stdio_server

    low = server._lowlevel_server
    async with stdio_server() as (read, write), low.lifespan(low) as state:
        await serve_loop(
            low, read, write, lifespan_state=state, init_options=low.create_initialization_options()
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--effects", default=os.environ.get(EFFECTS_ENV))
    parser.add_argument("--transport", choices=("stdio", "http"), default="stdio")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--legacy-only", action="store_true")
    args = parser.parse_args(argv)
    server = build(Path(args.effects) if args.effects else None)
    if args.transport == "http":
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    elif args.legacy_only:
        anyio.run(_serve_legacy_stdio, server)
    else:
        server.run()


if __name__ == "__main__":
    main()
