"""A small MCP server that the proxy tests put behind `planfence proxy`.

Every tool that has an effect appends one JSON line to the effects file (``--effects`` or
$PLANFENCE_TEST_EFFECTS), so a test can prove that a refused call never ran. Run it as a script:

    python tests/mcp/upstream_server.py --effects effects.jsonl                 # stdio, both eras
    python tests/mcp/upstream_server.py --legacy-only                           # handshake era only
    python tests/mcp/upstream_server.py --transport http --port 8765            # streamable HTTP

Some tools talk back to the client: `ask` elicits, `compose` samples, `client_roots` lists roots
(each through the SDK's resolvers: mid-call requests in the handshake era, an `input_required`
result in the 2026 era), `chatty` logs, `grow` adds a tool and announces the new tool list, and
`touch` announces that a resource changed, `complete` that a URL elicitation completed.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Annotated, Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, ListRoots, Resolve, Sample
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel, Field

EFFECTS_ENV = "PLANFENCE_TEST_EFFECTS"


class Booking(BaseModel):
    """The structured result of `book`: the tool declares an output schema."""

    booking: str
    destination: str


class Answer(BaseModel):
    """What `ask` elicits from the user."""

    answer: str


def _ask_user(question: str) -> Elicit[Answer]:
    return Elicit(question, Answer)


def _sample(topic: str) -> Sample:
    prompt = types.TextContent(type="text", text=f"Write one line about {topic}.")
    return Sample([types.SamplingMessage(role="user", content=prompt)], max_tokens=64)


def _roots() -> ListRoots:
    return ListRoots()


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

    @server.tool(description="Ask the user a question (elicitation); records the answer.")
    def ask(question: str, reply: Annotated[Answer, Resolve(_ask_user)], ctx: Context) -> str:
        record("asked", ctx, question=question, answer=reply.answer)
        return f"answer: {reply.answer}"

    @server.tool(description="Have the client's model write a line (sampling).")
    def compose(topic: str, sampled: Annotated[types.CreateMessageResult, Resolve(_sample)]) -> str:
        content = sampled.content
        return content.text if isinstance(content, types.TextContent) else "?"

    @server.tool(description="Return the client's roots, one per line.")
    def client_roots(found: Annotated[types.ListRootsResult, Resolve(_roots)]) -> str:
        return "\n".join(str(root.uri) for root in found.roots)

    @server.tool(description="Log one info message per step, and one debug message.")
    async def chatty(steps: int, ctx: Context) -> str:
        await ctx.debug("starting")
        for i in range(steps):
            await ctx.info(f"step {i + 1}")
        return f"logged {steps}"

    @server.tool(description="Add a copy of echo named `name` and announce the new tool list.")
    async def grow(name: str, ctx: Context) -> str:
        server.add_tool(lambda text: text, name=name, description="A copy of echo.")
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            await ctx.notify_tools_changed()
        else:
            await ctx.session.send_tool_list_changed()
        return f"added {name}"

    @server.tool(description="Announce that the resource at `uri` changed.")
    async def touch(uri: str, ctx: Context) -> str:
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            await ctx.notify_resource_updated(uri)
        else:
            await ctx.session.send_resource_updated(uri)
        return f"touched {uri}"

    @server.tool(description="Announce that a URL-mode elicitation completed (handshake era).")
    async def complete(elicitation_id: str, ctx: Context) -> str:
        await ctx.session.send_elicit_complete(elicitation_id)
        return f"completed {elicitation_id}"

    @server.tool(description="Echo, routed by a region the call mirrors into a header.")
    def route(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
        return f"routed to {region}"

    low = server._lowlevel_server

    async def subscribe(ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        record("subscribe", uri=params.uri)
        return types.EmptyResult()

    async def unsubscribe(ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        record("unsubscribe", uri=params.uri)
        return types.EmptyResult()

    async def set_level(ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
        record("set_level", level=params.level)
        return types.EmptyResult()

    async def roots_changed(ctx: Any, params: Any) -> None:
        record("roots_changed")

    low.add_request_handler("resources/subscribe", types.SubscribeRequestParams, subscribe)
    low.add_request_handler("resources/unsubscribe", types.UnsubscribeRequestParams, unsubscribe)
    low.add_request_handler("logging/setLevel", types.SetLevelRequestParams, set_level)
    low.add_notification_handler(
        "notifications/roots/list_changed", types.NotificationParams, roots_changed
    )
    # Handshake-era clients learn from the capabilities that the lists can change.
    low.create_initialization_options = functools.partial(  # type: ignore[method-assign]
        low.create_initialization_options,
        NotificationOptions(prompts_changed=True, resources_changed=True, tools_changed=True),
    )

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
    # Logging is deprecated in the 2026 protocol; this server logs on purpose.
    warnings.simplefilter("ignore", MCPDeprecationWarning)
    server = build(Path(args.effects) if args.effects else None)
    if args.transport == "http":
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    elif args.legacy_only:
        anyio.run(_serve_legacy_stdio, server)
    else:
        server.run()


if __name__ == "__main__":
    main()
