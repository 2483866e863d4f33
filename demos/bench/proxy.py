"""`planfence bench proxy`: what the MCP proxy adds to a tool call.

One trivial echo tool, called over stdio (a) directly, (b) through `planfence proxy` with the gate
on (a real plan checked against the benchmark's own store, every decision audited), (c) through the
proxy as an ungated tool, and on the same server with the gate inside it as server middleware
(`PlanfenceServerMiddleware`, gate on): (d) as shipped (the default audit: allows recorded in
batches just after), and (e) with `audit="durable"`, every decision on record before the tool runs,
and (f) through FastMCP's stdio proxy (`fastmcp.server.create_proxy`), the closest peer, when
fastmcp is installed. Each gated server has its own throwaway store, seeded alike. The clients are
open at once and called in turn, so drift on a shared machine hits all alike. Then cold start:
launch to the first `tools/list`, directly and through the proxy. The servers' own logs go to a file
(its last lines are in the error when a server fails), so the progress on stderr stays readable. Run
as a module, this file is the trivial upstream server (`--gate POLICY STORE`: with the in-server
gate; `--fastmcp-proxy`: FastMCP's proxy in front of it).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, TextIO, cast

from planfence.adapters.cli.common import add_output
from planfence.demos.bench.harness.options import (
    add_bench_store,
    add_quick,
    add_repeat,
    add_warmup,
    pick,
)
from planfence.demos.bench.harness.output import new_results, print_context, run_bench
from planfence.demos.bench.harness.stats import percentile
from planfence.demos.bench.harness.stores import bench_store, check_store
from planfence.demos.support import Progress

from .harness.scratch import scratch_folder

HELP = "latency of a tool call directly vs through the MCP proxy (gate on / ungated)"

POLICY = """
[tools.echo]
depends_on = ["bench/{key}"]

[tools.echo_free]
ungated = true
"""
REPEAT, QUICK_REPEAT = 300, 20
WARMUP, QUICK_WARMUP = 30, 3
PATHS = ("direct", "relay", "proxied", "ungated", "inprocess", "inprocess_durable")
PEER = "fastmcp"  # FastMCP's proxy on the same upstream, when fastmcp is installed
COLD_STARTS, QUICK_COLD_STARTS = 3, 1
GATED_SERVERS = ("proxy", "in-server", "in-server, durable audit")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_quick(parser, f"{QUICK_REPEAT} timed calls per path")
    add_repeat(parser, REPEAT, QUICK_REPEAT, "timed calls per path")
    add_warmup(parser, WARMUP, QUICK_WARMUP)
    parser.add_argument(
        "--cold-starts",
        type=int,
        default=None,
        metavar="N",
        help=f"launches timed per server for cold start (default {COLD_STARTS}, "
        f"--quick {QUICK_COLD_STARTS})",
    )
    add_bench_store(parser)
    add_output(parser)


def run(args: argparse.Namespace) -> int:
    try:
        import anyio
        import mcp  # noqa: F401
    except ModuleNotFoundError as exc:
        from planfence.shared_memory import MissingExtraError

        raise MissingExtraError("the proxy benchmark", "mcp") from exc
    repeat = pick(args.repeat, args.quick, REPEAT, QUICK_REPEAT)
    warmup = pick(args.warmup, args.quick, WARMUP, QUICK_WARMUP)
    check_store(args.store, shared=True)
    results = new_results(stores=[], calls=0, warmup=warmup)

    cold_starts = max(1, pick(args.cold_starts, args.quick, COLD_STARTS, QUICK_COLD_STARTS))

    def measure() -> None:
        anyio.run(_measure, repeat, warmup, args.store, results, cold_starts)

    return run_bench(args, results, measure, _show)


def _show(r: Mapping[str, Any]) -> None:
    print_context(r)
    print(f"calls per path: {r['calls']}")
    if not r["calls"]:
        return
    direct = r["direct_p50_ms"]
    rows = [
        ("direct", "direct"),
        ("raw line relay", "relay"),
        ("planfence proxy, gated", "proxied"),
        ("planfence proxy, ungated", "ungated"),
        ("FastMCP proxy", "fastmcp"),
        ("in-server gate", "inprocess"),
        ("in-server gate, durable audit", "inprocess_durable"),
    ]
    print(f"{'path':<31}{'p50 ms':>9}{'p99 ms':>9}{'added p50':>11}{'x direct':>10}")
    for label, key in rows:
        if f"{key}_p50_ms" not in r:
            continue
        p50, p99 = r[f"{key}_p50_ms"], r.get(f"{key}_p99_ms")
        shown = f"{p99:9.3f}" if p99 is not None else " " * 9
        added = f"{p50 - direct:11.3f}" if key != "direct" else " " * 11
        print(f"{label:<31}{p50:9.3f}{shown}{added}{p50 / direct:10.2f}")
    print(f"ratio proxied/direct at p50: {r['ratio_p50']:.2f}x")
    if r.get("added_vs_relay_p50") is not None:
        print(
            f"added at p50: gated proxy {r['proxied_added_p50_ms']:.3f} ms = "
            f"{r['added_vs_relay_p50']:.2f}x the raw relay's; ungated "
            f"{r['ungated_p50_ms'] - r['relay_p50_ms']:+.3f} ms against the relay"
        )
    if r.get("added_vs_fastmcp_p50") is not None:
        print(f"added at p50, gated proxy vs FastMCP's: {r['added_vs_fastmcp_p50']:.2f}x")
    print(f"ratio in-server gate/direct at p50: {r['inprocess_ratio_p50']:.2f}x")
    cold = r.get("cold_start_ms") or {}
    if cold:
        direct, proxy = cold["direct"], cold["proxy"]
        print(f"cold start to tools/list: direct {direct:.0f} ms, proxy {proxy:.0f} ms")


def _summary(samples: Mapping[str, list[float]]) -> dict[str, Any]:
    calls = min(len(s) for s in samples.values())
    if not calls:
        return {"calls": 0}

    def pct(name: str, q: float) -> float:
        return round(percentile(samples[name][:calls], q), 4)

    direct = pct("direct", 50)
    added = pct("proxied", 50) - direct
    relay_added = pct("relay", 50) - direct
    out: dict[str, Any] = {
        "relay_p50_ms": pct("relay", 50),
        "relay_p99_ms": pct("relay", 99),
        "relay_added_p50_ms": round(relay_added, 4),
        "proxied_added_p50_ms": round(added, 4),
        "ungated_added_p50_ms": round(pct("ungated", 50) - direct, 4),
        "added_vs_relay_p50": round(added / relay_added, 3) if relay_added > 0 else None,
    }
    if PEER in samples:
        peer_added = pct(PEER, 50) - direct
        out |= {
            "fastmcp_p50_ms": pct(PEER, 50),
            "fastmcp_p99_ms": pct(PEER, 99),
            "fastmcp_added_p50_ms": round(peer_added, 4),
            "added_vs_fastmcp_p50": round(added / peer_added, 3) if peer_added > 0 else None,
        }
    return out | {
        "direct_p50_ms": direct,
        "direct_p99_ms": pct("direct", 99),
        "proxied_p50_ms": pct("proxied", 50),
        "proxied_p99_ms": pct("proxied", 99),
        "ungated_p50_ms": pct("ungated", 50),
        "ungated_p99_ms": pct("ungated", 99),
        "ratio_p50": round(pct("proxied", 50) / pct("direct", 50), 3),
        "inprocess_p50_ms": pct("inprocess", 50),
        "inprocess_ratio_p50": round(pct("inprocess", 50) / pct("direct", 50), 3),
        "inprocess_durable_p50_ms": pct("inprocess_durable", 50),
        "inprocess_durable_ratio_p50": round(pct("inprocess_durable", 50) / pct("direct", 50), 3),
        "calls": calls,
    }


async def _measure(
    calls: int, warmup: int, store_url: str | None, results: dict[str, Any], cold_starts: int
) -> None:
    """Fill `results` in when the calls end, also when they are cut short (Ctrl-C): then with
    the rounds that completed."""
    from mcp.client.stdio import StdioServerParameters
    from mcp_types import CallToolResult, RequestParamsMeta

    from planfence.plugins.gate import create_plan
    from planfence.shared_memory import open_async_store

    with_peer = _has_fastmcp()
    samples: dict[str, list[float]] = {name: [] for name in (*PATHS, *([PEER] * with_peer))}
    # Each gated server has a store of its own, seeded alike: one server's audit writes would
    # otherwise make every other server's next read reload what changed (another process wrote).
    targets = [bench_store(store_url, shared=True) for _ in GATED_SERVERS]
    try:
        plans: list[str] = []
        for target in targets:
            results["stores"].append(target.describe())
            store = await open_async_store(target.url)
            try:
                await store.own("bench/k", "planner")
                rec = await store.put("bench/k", {"v": 1}, author="planner")
                plans.append((await create_plan(store, author="planner", parents=[rec.id])).id)
            finally:
                await store.aclose()
        with (
            scratch_folder("planfence-bench-proxy-") as tmp,
            tempfile.TemporaryFile("w+", dir=tmp, prefix="servers-", suffix=".log") as log,
        ):
            policy = Path(tmp) / "policy.toml"
            policy.write_text(POLICY)

            def client(params: StdioServerParameters) -> Any:
                from mcp import Client
                from mcp.client.stdio import stdio_client

                return Client(stdio_client(params, errlog=log), cache=None)

            at_proxy, in_server, durably = (t.url for t in targets)

            env = dict(os.environ)
            upstream = [sys.executable, "-m", "planfence.demos.bench.proxy"]
            direct = StdioServerParameters(command=upstream[0], args=upstream[1:], env=env)
            relay = ["-m", "planfence.demos.bench.relay", "--", *upstream]
            relayed = StdioServerParameters(command=sys.executable, args=relay, env=env)
            proxy = ["-m", "planfence.adapters.cli", "proxy", "--policy", str(policy)]
            proxy += ["--store", at_proxy]
            proxied = StdioServerParameters(
                command=sys.executable, args=[*proxy, "--", *upstream], env=env
            )
            gated = [*upstream, "--gate", str(policy), in_server]
            in_server_gated = StdioServerParameters(command=gated[0], args=gated[1:], env=env)
            durable = [*upstream, "--gate-durable", str(policy), durably]
            in_server_durable = StdioServerParameters(command=durable[0], args=durable[1:], env=env)
            meta_proxy, meta_in_server, meta_durable = (
                cast("RequestParamsMeta", {"dev.planfence/plan": plan}) for plan in plans
            )
            peer = [*upstream, "--fastmcp-proxy"]
            fastmcp_proxy = StdioServerParameters(command=peer[0], args=peer[1:], env=env)
            async with (
                client(direct) as d,
                client(relayed) as r,
                client(proxied) as p,
                client(in_server_gated) as g,
                client(in_server_durable) as gd,
                AsyncExitStack() as optional,
            ):
                paths: dict[str, Callable[[int], Awaitable[CallToolResult]]] = {
                    "direct": lambda i: d.call_tool("echo", {"key": "k", "text": str(i)}),
                    "relay": lambda i: r.call_tool("echo", {"key": "k", "text": str(i)}),
                    "proxied": lambda i: p.call_tool(
                        "echo", {"key": "k", "text": str(i)}, meta=meta_proxy
                    ),
                    "ungated": lambda i: p.call_tool("echo_free", {"text": str(i)}),
                    "inprocess": lambda i: g.call_tool(
                        "echo", {"key": "k", "text": str(i)}, meta=meta_in_server
                    ),
                    "inprocess_durable": lambda i: gd.call_tool(
                        "echo", {"key": "k", "text": str(i)}, meta=meta_durable
                    ),
                }
                if with_peer:
                    f = await optional.enter_async_context(client(fastmcp_proxy))
                    paths[PEER] = lambda i: f.call_tool("echo", {"key": "k", "text": str(i)})
                with Progress("bench proxy", warmup + calls) as progress:
                    for i in range(warmup + calls):
                        for name, call in paths.items():
                            start = time.perf_counter()
                            result = await call(i)
                            elapsed = time.perf_counter() - start
                            if result.is_error:
                                raise RuntimeError(
                                    f"{name} call failed: {result.content}" + _tail(log)
                                )
                            if i >= warmup:
                                samples[name].append(elapsed * 1000.0)
                        what = "warm-up" if i < warmup else f"call {i - warmup + 1}/{calls}"
                        progress.advance(what)
            results["cold_start_ms"] = {
                "direct": await _cold_start(client, direct, cold_starts),
                "proxy": await _cold_start(client, proxied, cold_starts),
            }
    finally:
        results.update(_summary(samples))
        for target in targets:
            target.cleanup()


def _has_fastmcp() -> bool:
    import importlib.util

    return importlib.util.find_spec("fastmcp") is not None


def _tail(log: TextIO, lines: int = 20) -> str:
    """The servers' last log lines, for an error message."""
    log.flush()
    log.seek(0)
    tail = log.read().splitlines()[-lines:]
    log.seek(0, os.SEEK_END)
    return ("\nthe servers' last log lines:\n" + "\n".join(tail)) if tail else ""


async def _cold_start(client: Callable[[Any], Any], params: Any, runs: int) -> float:
    """Median milliseconds from launching the server to the answer of the first `tools/list`."""
    times: list[float] = []
    for _ in range(runs):
        start = time.perf_counter()
        async with client(params) as session:
            await session.list_tools()
            times.append((time.perf_counter() - start) * 1000.0)
    return round(percentile(times, 50), 1)


def serve_upstream(argv: list[str]) -> None:
    """The trivial upstream: two echo tools, one the policy gates and one it exempts; with
    `--gate POLICY STORE`, the gate runs inside it as server middleware in its default audit mode
    (`--gate-durable`: with the durable audit)."""
    from mcp.server.mcpserver import MCPServer

    if argv[:1] == ["--fastmcp-proxy"]:
        _serve_fastmcp_proxy()
        return
    if argv[:1] in (["--gate"], ["--gate-durable"]):
        from planfence.adapters.mcp import PlanfenceServerMiddleware
        from planfence.plugins.gate import DEFAULT_AUDIT, AuditMode

        audit: AuditMode = "durable" if argv[0] == "--gate-durable" else DEFAULT_AUDIT
        gate = PlanfenceServerMiddleware(argv[2], argv[1], audit=audit)
        # The lifespan closes the gate when the server stops: the queued allows are written.
        server = MCPServer("planfence-bench-echo", lifespan=gate.lifespan)
        server.middleware.append(gate)
    else:
        server = MCPServer("planfence-bench-echo")

    @server.tool()
    def echo(key: str, text: str) -> str:
        return text

    @server.tool()
    def echo_free(text: str) -> str:
        return text

    server.run()


def _serve_fastmcp_proxy() -> None:
    """FastMCP's stdio proxy in front of the trivial upstream (as its docs show it)."""
    from fastmcp.client.transports import StdioTransport
    from fastmcp.server import create_proxy

    upstream = StdioTransport(sys.executable, ["-m", "planfence.demos.bench.proxy"])
    create_proxy(upstream, mode="auto").run(show_banner=False)


if __name__ == "__main__":
    serve_upstream(sys.argv[1:])
