"""`planfence bench link`: options, settings, and the run (see the package docstring)."""

from __future__ import annotations

import argparse
import asyncio
import secrets
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from planfence.adapters.cli.common import add_output
from planfence.adapters.owner_service import Keyring
from planfence.demos.bench.harness.options import (
    add_bench_store,
    add_quick,
    add_repeat,
    non_negative_float,
    pick,
)
from planfence.demos.bench.harness.output import new_results, run_bench
from planfence.demos.bench.harness.stats import percentile
from planfence.demos.bench.harness.stores import check_store, open_bench_store
from planfence.demos.bench.netem.model import MIN_RTO_MS, default_rto_ms
from planfence.demos.bench.netem.relay import Link, LinkRelay
from planfence.demos.bench.netem.sources import add_link_arguments, load_traces
from planfence.demos.bench.netem.trace import Trace
from planfence.demos.support import Progress

from ..harness.owners import OWNERS, REQUESTER, owner_services
from ..harness.scratch import scratch_folder
from ..harness.services import port_of
from .report import print_tables
from .rows import (
    GATE_WARMUP,
    SYNC_KIB,
    SYNC_WARMUP,
    gate_rows,
    seed_gate_cases,
    seed_sync_keys,
    sync_rows,
)

HELP = "gate stall and traffic on loopback vs an emulated cellular link (mahimahi trace)"

DEFAULT_LOSS = 0.02
REPEAT, QUICK_REPEAT = 30, 3


def loss_rate(text: str) -> float:
    value = non_negative_float(text)
    if value >= 1.0:
        raise argparse.ArgumentTypeError(f"must be below 1, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_quick(parser, f"{QUICK_REPEAT} timed checks and syncs per row")
    add_repeat(parser, REPEAT, QUICK_REPEAT, "timed gate checks and head syncs per row")
    add_bench_store(parser)
    add_output(parser)
    add_link_arguments(parser)
    parser.add_argument(
        "--loss",
        type=loss_rate,
        default=DEFAULT_LOSS,
        help="packet loss rate for the lossy sync rows, in [0, 1)",
    )
    parser.add_argument(
        "--rto-ms",
        type=non_negative_float,
        default=None,
        help=f"retransmission timeout per loss (default: max({MIN_RTO_MS:g}, 2 x RTT))",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the loss draws")
    parser.add_argument(
        "--trace-offset-s",
        type=non_negative_float,
        default=0.0,
        help="start this far into the trace, seconds",
    )


@dataclass(frozen=True)
class Settings:
    up: Trace
    down: Trace
    trace_kind: str
    delay_ms: float
    loss: float
    rto_ms: float
    seed: int
    offset_ms: float
    repeat: int

    def link(self, loss: float = 0.0) -> Link:
        return Link(
            self.up,
            self.down,
            delay_ms=self.delay_ms,
            loss=loss,
            rto_ms=self.rto_ms,
            seed=self.seed,
            offset_ms=self.offset_ms,
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "trace_kind": self.trace_kind,
            "trace_up": self.up.source,
            "trace_down": self.down.source,
            "trace_up_mean_mbps": round(self.up.mean_mbps, 3),
            "trace_down_mean_mbps": round(self.down.mean_mbps, 3),
            "delay_ms": self.delay_ms,
            "loss": self.loss,
            "rto_ms": self.rto_ms,
            "seed": self.seed,
            "trace_offset_ms": self.offset_ms,
            "repeat": self.repeat,
        }


def run(args: argparse.Namespace) -> int:
    up, down, kind = load_traces(args)
    settings = Settings(
        up=up,
        down=down,
        trace_kind=kind,
        delay_ms=args.delay_ms,
        loss=args.loss,
        rto_ms=args.rto_ms if args.rto_ms is not None else default_rto_ms(args.delay_ms),
        seed=args.seed,
        offset_ms=args.trace_offset_s * 1000.0,
        repeat=pick(args.repeat, args.quick, REPEAT, QUICK_REPEAT),
    )
    check_store(args.store, shared=True)
    results = new_results(settings=settings.as_json(), stores=[], gate=[], sync=[])

    def measure() -> None:
        asyncio.run(_bench(settings, args.store, results))

    return run_bench(args, results, measure, print_tables)


async def _bench(settings: Settings, store_url: str | None, results: dict[str, Any]) -> None:
    """Fill `results` in; every store, folder, relay and process is released on the way out,
    also when the run is cancelled by Ctrl-C."""
    keyring_text = {a: secrets.token_hex(24) for a in (*OWNERS, REQUESTER)}
    keyring = Keyring(keyring_text, source="<bench>")
    sync_keys_needed = 1 + (max(SYNC_KIB) * 1024) // 60  # answers take > 60 bytes per key
    link, lossy = settings.link(), settings.link(settings.loss)
    relays: list[LinkRelay] = []
    async with AsyncExitStack() as stack:
        target, store = await open_bench_store(stack, store_url, results)
        logs = stack.enter_context(scratch_folder("planfence-link-"))
        policy, cases = await seed_gate_cases(store)
        sync_keys = await seed_sync_keys(store, sync_keys_needed)
        direct = stack.enter_context(owner_services(target.url, keyring_text, logs))
        via: dict[str, str] = {}
        for owner, url in direct.items():
            relay = LinkRelay(link, "127.0.0.1", port_of(url))
            via[owner] = (await stack.enter_async_context(relay)).url
            relays.append(relay)
        lossy_relay = LinkRelay(lossy, "127.0.0.1", port_of(direct[OWNERS[0]]))
        lossy_url = (await stack.enter_async_context(lossy_relay)).url
        relays.append(lossy_relay)
        # settings last: they read the relays' statistics, also after Ctrl-C
        stack.callback(_link_statistics, results["settings"], settings, link, lossy, relays)
        total = GATE_WARMUP + settings.repeat + SYNC_WARMUP + settings.repeat
        progress = stack.enter_context(Progress("bench link", total))
        await gate_rows(
            store,
            policy,
            cases,
            {"loopback": direct, "link": via},
            keyring,
            settings.repeat,
            results["gate"],
            progress,
        )
        loss_path = f"link+loss{settings.loss:g}"
        await sync_rows(
            sync_keys,
            {"loopback": direct[OWNERS[0]], "link": via[OWNERS[0]], loss_path: lossy_url},
            {"loopback": 0.0, "link": 0.0, loss_path: settings.loss},
            keyring,
            settings.repeat,
            results["sync"],
            progress,
        )


def _link_statistics(
    out: dict[str, Any], settings: Settings, link: Link, lossy: Link, relays: list[LinkRelay]
) -> None:
    late = [ms for r in relays for ms in r.late_ms]
    used = link.now_ms() - settings.offset_ms if link.started else 0.0
    out.update(
        {
            "link_up_packets": link.up.packets + lossy.up.packets,
            "link_down_packets": link.down.packets + lossy.down.packets,
            "lossy_packets": lossy.up.packets + lossy.down.packets,
            "lossy_losses": lossy.up.lost + lossy.down.lost,
            "trace_time_used_ms": round(used),
            "relay_late_p50_ms": round(percentile(late, 50), 3),
            "relay_late_p99_ms": round(percentile(late, 99), 3),
        }
    )
