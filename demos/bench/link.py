"""`planfence bench link`: the gate's stall and traffic on loopback vs an emulated cellular link.

The link emulator runs in user space (no kernel traffic shaping needed): an asyncio TCP relay
listens on a loopback port, forwards to a target (an owner service), and paces each direction by
a mahimahi packet-delivery trace, the format of the public cellular traces (one line = one
opportunity for one 1500-byte packet at that millisecond; the trace loops). The traces come from
`--trace-up/--trace-down`, else `$PLANFENCE_TRACES`, else a synthetic cellular trace with the
statistics of the AT&T LTE driving traces (see `traces`); the output names the one used.

The model, per direction (pure code below, `Trace` / `TraceQueue` / `Direction`, no clock):
- Bytes read from a socket are cut into packets of at most 1500 bytes (TCP/IP headers are not
  counted). Packets wait in one FIFO bottleneck queue per direction, shared by every connection
  over the link, with no size limit (mahimahi's default).
- Each trace opportunity drains up to 1500 bytes from the head of the queue; a packet leaves at
  the opportunity that drains its last byte, so small packets can share one. Credit left in an
  opportunity that finds the queue empty is lost. An opportunity at millisecond t serves packets
  that arrived at or before t.
- A packet reaches the far side a fixed one-way propagation delay after it leaves (`--delay-ms`,
  default 20: a 40 ms base round trip).
- Loss: the relay speaks TCP on both sides, so it cannot drop bytes; a lost packet is instead
  delivered late, as TCP would deliver it after a retransmission timeout: each loss (independent,
  probability `--loss`, seeded) adds one RTO, RTO = max(200 ms, 2 x base RTT), doubling for each
  further loss of the same packet. The retransmission is assumed to find link capacity; fast
  retransmit is not modelled (accurate for short transfers, whose lost tail packets do wait for
  the timer; pessimistic for long ones).
- Delivery within one connection is in order: a late packet holds back every byte behind it.
- A new connection is usable one base round trip after it is opened (the TCP handshake), before
  its first byte enters the queue. Congestion control (slow start) is not modelled.

The benchmark, in one run, interleaved:
- Gate stall: `Gate.check` wall time on the allow path (audited, as shipped) with heads from two
  HTTP owner services, asked directly on loopback and through the emulated link, for planfence
  (D(a) only) and the equally safe batch all-key check, at 8 / 32 / 128 shared keys and
  |D(a)| = 1, 4; plus HTTP bytes per validation.
- One sync: one authenticated owner-head request on a fresh TCP connection whose signed answer
  is about 1, 4, 16, 64 KiB, on loopback and through the link with and without loss.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import math
import os
import random
import secrets
import tempfile
import time
from collections.abc import Awaitable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from planfence.adapters.cli.common import UsageError, add_output
from planfence.adapters.owner_service import Keyring
from planfence.demos.baselines import AllKeysHeads, store_key_space
from planfence.plugins.gate import (
    ALLOW,
    Gate,
    HeadSource,
    Policy,
)
from planfence.shared_memory import AsyncStore, open_async_store

from .._support import Progress
from .common import (
    add_bench_store,
    add_quick,
    add_repeat,
    bench_store,
    check_store,
    new_results,
    percentile,
    pick,
    print_context,
    run_bench,
)
from .gate import OWNERS, REQUESTER, _owner_services, _plan_at_depth, _seed_keys
from .traces import SYNTHETIC_SEED, synthetic_source, synthetic_times
from .wire import CountedOwnerHeads

HELP = "gate stall and traffic on loopback vs an emulated cellular link (mahimahi trace)"

MTU = 1500
DEFAULT_DELAY_MS = 20.0
DEFAULT_LOSS = 0.02
MIN_RTO_MS = 200.0
TRACES_ENV = "PLANFENCE_TRACES"
DEFAULT_TRACE = "ATT-LTE-driving"
REPEAT, QUICK_REPEAT = 30, 3
KEY_SPACES = (8, 32, 128)
DEPS = (1, 4)
SYNC_KIB = (1, 4, 16, 64)


# ---- the pure model: traces, the bottleneck queue, delay, loss (no clock, no sockets)


class TraceError(ValueError):
    """A trace file that cannot drive a link."""


@dataclass(frozen=True)
class Trace:
    """A mahimahi trace: sorted millisecond timestamps, each one opportunity to send one MTU.

    The trace loops with a period equal to its last timestamp (as mahimahi replays it), so
    opportunity `i` is at `times[i % n] + (i // n) * period`.
    """

    times: tuple[int, ...]
    source: str = "<trace>"

    def __post_init__(self) -> None:
        if not self.times:
            raise TraceError(f"{self.source}: the trace has no delivery opportunities")
        ordered = all(a <= b for a, b in zip(self.times, self.times[1:], strict=False))
        if not ordered or self.times[0] < 0:
            raise TraceError(f"{self.source}: timestamps must be non-negative and non-decreasing")
        if self.times[-1] <= 0:
            raise TraceError(f"{self.source}: the last timestamp must be after 0 ms")

    @classmethod
    def parse(cls, text: str, source: str = "<trace>") -> Trace:
        times = []
        for lineno, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line:
                continue
            try:
                times.append(int(line))
            except ValueError:
                raise TraceError(f"{source}:{lineno}: not a millisecond count: {line!r}") from None
        return cls(tuple(times), source)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Trace:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise TraceError(f"cannot read trace {path}: {exc.strerror or exc}") from None
        return cls.parse(text, str(path))

    @property
    def period(self) -> int:
        return self.times[-1]

    @property
    def mean_mbps(self) -> float:
        """Capacity averaged over one loop, in Mbit/s."""
        return len(self.times) * MTU * 8 / self.period / 1000

    def at(self, index: int) -> int:
        """Time (ms) of opportunity number `index`, counting across loops."""
        loops, i = divmod(index, len(self.times))
        return self.times[i] + loops * self.period

    def first_at_or_after(self, t_ms: float, min_index: int = 0) -> int:
        """Index of the first opportunity at or after `t_ms`, and not before `min_index`."""
        n = len(self.times)
        t = max(t_ms, 0.0)
        loops = int(t // self.period)
        i = bisect.bisect_left(self.times, t - loops * self.period)
        index = loops * n + i
        while index > 0 and self.at(index - 1) >= t:  # equal times straddling a loop boundary
            index -= 1
        return max(index, min_index)


def split_packets(nbytes: int, mtu: int = MTU) -> list[int]:
    """Sizes of the packets `nbytes` of stream data travel in: full MTUs, then the rest."""
    if nbytes < 0:
        raise ValueError("byte count must be non-negative")
    full, rest = divmod(nbytes, mtu)
    return [mtu] * full + ([rest] if rest else [])


class TraceQueue:
    """One direction's bottleneck: a FIFO queue drained by trace opportunities (byte credit).

    Packets must be offered in order of arrival time.
    """

    def __init__(self, trace: Trace, mtu: int = MTU) -> None:
        self.trace = trace
        self.mtu = mtu
        self._index = -1  # the opportunity last used
        self._credit = 0  # bytes it can still carry

    def drain(self, size: int, arrival_ms: float) -> float:
        """Queue a packet of `size` bytes that arrives at `arrival_ms`; the time (ms) at which
        its last byte leaves the queue."""
        if not 0 < size <= self.mtu:
            raise ValueError(f"packet size must be in 1..{self.mtu}, got {size}")
        if self._credit and self.trace.at(self._index) < arrival_ms:
            self._credit = 0  # that opportunity passed before this packet was there
        left = size
        while left:
            if not self._credit:
                self._index = self.trace.first_at_or_after(arrival_ms, self._index + 1)
                self._credit = self.mtu
            take = min(left, self._credit)
            left -= take
            self._credit -= take
        return float(self.trace.at(self._index))


@dataclass
class Flow:
    """One connection's stream in one direction: TCP hands bytes over in order."""

    not_before_ms: float = 0.0  # nothing leaves before this (the handshake)
    last_delivery_ms: float = -math.inf


@dataclass(frozen=True)
class Packet:
    size: int
    arrival_ms: float  # entered the bottleneck queue
    departure_ms: float  # its last byte left the queue
    losses: int  # how many times it was lost before getting through
    delivery_ms: float  # handed to the far side (after delay, retransmissions, ordering)


def default_rto_ms(delay_ms: float) -> float:
    """The retransmission timeout for a base RTT of 2 x delay: max(200 ms, 2 x RTT)."""
    return max(MIN_RTO_MS, 4.0 * delay_ms)


class Direction:
    """One direction of an emulated link: trace-paced queue, propagation delay, loss as delay.

    Deterministic: the same trace, seed and sequence of `send` calls give the same deliveries.
    """

    def __init__(
        self,
        trace: Trace,
        *,
        delay_ms: float = DEFAULT_DELAY_MS,
        loss: float = 0.0,
        rto_ms: float | None = None,
        seed: int = 0,
        mtu: int = MTU,
    ) -> None:
        if delay_ms < 0:
            raise ValueError("delay must be non-negative")
        if not 0.0 <= loss < 1.0:
            raise ValueError("loss must be in [0, 1)")
        self.queue = TraceQueue(trace, mtu)
        self.delay_ms = delay_ms
        self.loss = loss
        self.rto_ms = default_rto_ms(delay_ms) if rto_ms is None else rto_ms
        self.mtu = mtu
        self._rng = random.Random(seed)
        self.packets = 0
        self.lost = 0

    def _losses(self) -> int:
        count = 0
        while self.loss and self._rng.random() < self.loss:
            count += 1
        return count

    def send(self, nbytes: int, at_ms: float, flow: Flow | None = None) -> list[Packet]:
        """Stream bytes written at `at_ms`: their packets and when each reaches the far side."""
        flow = flow if flow is not None else Flow()
        # Bytes join the shared queue when written, so the queue only ever moves forward for
        # every connection; a connection still in its handshake holds its own packets back
        # instead of pushing other connections' packets behind it.
        arrival = at_ms
        out = []
        for size in split_packets(nbytes, self.mtu):
            departure = max(self.queue.drain(size, arrival), flow.not_before_ms)
            losses = self._losses()
            # each loss costs one timeout, and the timer doubles for every further loss
            late = sum(self.rto_ms * 2**k for k in range(losses))
            delivery = max(departure + self.delay_ms + late, flow.last_delivery_ms)
            flow.last_delivery_ms = delivery
            self.packets += 1
            self.lost += losses
            out.append(Packet(size, arrival, departure, losses, delivery))
        return out


# ---- the asyncio shell: a TCP relay that delivers bytes when the model says


class Link:
    """Both directions of an emulated path, shared by every connection relayed over it.

    `up` carries client -> target bytes, `down` target -> client. Trace time 0 is the moment the
    link is first used (plus `offset_ms`, to replay a later stretch of the trace).
    """

    def __init__(
        self,
        up: Trace,
        down: Trace,
        *,
        delay_ms: float = DEFAULT_DELAY_MS,
        loss: float = 0.0,
        rto_ms: float | None = None,
        seed: int = 0,
        offset_ms: float = 0.0,
        handshake: bool = True,
    ) -> None:
        common: dict[str, Any] = {"delay_ms": delay_ms, "loss": loss, "rto_ms": rto_ms}
        self.up = Direction(up, seed=seed, **common)
        self.down = Direction(down, seed=seed + 1, **common)
        self.delay_ms = delay_ms
        self.offset_ms = offset_ms
        self.handshake = handshake
        self._epoch: float | None = None

    @property
    def started(self) -> bool:
        """Whether trace time has started (the link was used)."""
        return self._epoch is not None

    def now_ms(self) -> float:
        now = asyncio.get_running_loop().time()
        if self._epoch is None:
            self._epoch = now
        return (now - self._epoch) * 1000.0 + self.offset_ms

    def sleep_until(self, t_ms: float) -> Awaitable[None]:
        return asyncio.sleep(max(0.0, (t_ms - self.now_ms()) / 1000.0))


class LinkRelay:
    """Listen on a loopback port, forward each connection to `target`, paced by `link`.

    Use as `async with LinkRelay(link, host, port) as relay:` and connect to `relay.port`.
    """

    def __init__(
        self,
        link: Link,
        target_host: str,
        target_port: int,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.link = link
        self.target = (target_host, target_port)
        self.host = host
        self.port = port
        self.connections = 0
        # how late each write went out after the model's delivery time (the emulator's own error)
        self.late_ms: list[float] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> LinkRelay:
        self._server = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        self.link.now_ms()  # trace time starts now
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aenter__(self) -> LinkRelay:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.get_running_loop().create_task(self._relay(reader, writer))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _relay(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self.connections += 1
        opened = self.link.now_ms()
        target_w: asyncio.StreamWriter | None = None
        pumps: list[asyncio.Task[None]] = []
        try:
            target_r, target_w = await asyncio.open_connection(*self.target)
            rtt = 2 * self.link.delay_ms if self.link.handshake else 0.0
            up = Flow(not_before_ms=opened + rtt)
            loop = asyncio.get_running_loop()
            pumps = [
                loop.create_task(self._pump(client_r, target_w, self.link.up, up)),
                loop.create_task(self._pump(target_r, client_w, self.link.down, Flow())),
            ]
            # both directions run until both end; a failure on either side ends the connection
            await asyncio.wait(pumps, return_when=asyncio.FIRST_EXCEPTION)
        except OSError:
            pass  # the target refused: close the client
        finally:
            # Close both sockets before anything that can be interrupted: a relay cancelled
            # while it is already shutting down must still release them.
            for w in (client_w, target_w):
                if w is not None:
                    w.close()
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            for w in (client_w, target_w):
                if w is not None:
                    with contextlib.suppress(OSError):
                        await w.wait_closed()

    async def _pump(
        self,
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        direction: Direction,
        flow: Flow,
    ) -> None:
        """Read from `src` as fast as it sends; write each packet to `dst` when it is due."""
        due: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()

        async def deliver() -> None:
            while (item := await due.get()) is not None:
                at_ms, data = item
                await self.link.sleep_until(at_ms)
                self.late_ms.append(self.link.now_ms() - at_ms)
                dst.write(data)
                await dst.drain()
            if dst.can_write_eof():
                dst.write_eof()

        writer = asyncio.get_running_loop().create_task(deliver())
        try:
            while data := await src.read(1 << 16):
                offset = 0
                for packet in direction.send(len(data), self.link.now_ms(), flow):
                    due.put_nowait((packet.delivery_ms, data[offset : offset + packet.size]))
                    offset += packet.size
            due.put_nowait(None)
            await writer
        finally:
            if not writer.done():
                writer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await writer


# ---- the benchmark


def load_traces(args: argparse.Namespace) -> tuple[Trace, Trace, str]:
    """The uplink and downlink traces the options ask for, and what kind they are ("file" or
    "synthetic"): `--trace-up/--trace-down`, else $PLANFENCE_TRACES, else the synthetic cellular
    trace (see `traces`). A trace that was asked for and cannot be read is a usage error."""
    up_path, down_path = args.trace_up, args.trace_down
    if (up_path is None) != (down_path is None):
        raise UsageError("--trace-up and --trace-down go together: give both, or neither")
    if up_path is None:
        folder = os.environ.get(TRACES_ENV)
        if folder:
            up_path = os.path.join(folder, f"{DEFAULT_TRACE}.up")
            down_path = os.path.join(folder, f"{DEFAULT_TRACE}.down")
            if not (os.path.isfile(up_path) and os.path.isfile(down_path)):
                raise UsageError(
                    f"${TRACES_ENV} is {folder!r}, which does not hold {DEFAULT_TRACE}.up and "
                    f"{DEFAULT_TRACE}.down: point it at a folder of mahimahi traces, pass "
                    "--trace-up FILE --trace-down FILE, or unset it to use the synthetic trace"
                )
    if up_path is None or down_path is None:
        up = Trace(tuple(synthetic_times("up")), synthetic_source("up"))
        down = Trace(tuple(synthetic_times("down")), synthetic_source("down"))
        return up, down, "synthetic"
    try:
        return Trace.load(up_path), Trace.load(down_path), "file"
    except TraceError as exc:
        raise UsageError(str(exc)) from None


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0.0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a non-negative number, got {text}")
    return value


def loss_rate(text: str) -> float:
    value = non_negative_float(text)
    if value >= 1.0:
        raise argparse.ArgumentTypeError(f"must be below 1, got {text}")
    return value


def add_link_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every benchmark over the emulated link takes: the traces and the delay."""
    parser.add_argument(
        "--trace-up",
        metavar="FILE",
        default=None,
        help=f"mahimahi uplink trace, with --trace-down (default: ${TRACES_ENV}/"
        f"{DEFAULT_TRACE}.up when ${TRACES_ENV} names a folder, else a synthetic cellular trace)",
    )
    parser.add_argument(
        "--trace-down",
        metavar="FILE",
        default=None,
        help=f"mahimahi downlink trace, with --trace-up (default: ${TRACES_ENV}/"
        f"{DEFAULT_TRACE}.down, else the synthetic trace)",
    )
    parser.add_argument(
        "--delay-ms",
        type=non_negative_float,
        default=DEFAULT_DELAY_MS,
        help="one-way propagation delay on the link, ms",
    )


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

    return run_bench(args, results, measure, _print_tables)


@dataclass(frozen=True)
class GateCase:
    keys: int
    deps: int
    tool: str
    plan: str


@dataclass
class Samples:
    seconds: list[float] = field(default_factory=list)
    bytes: int = 0
    checks: int = 0


def _rotate(items: Sequence[Any], by: int) -> list[Any]:
    by %= len(items)
    return [*items[by:], *items[:by]]


async def _seed_gate_cases(store: AsyncStore) -> tuple[Policy, list[GateCase]]:
    policy = Policy()
    cases = []
    for n in KEY_SPACES:
        facts = await _seed_keys(store, f"t{n}", n)
        keys = [f"t{n}/k{i:03d}" for i in range(n)]
        for deps in DEPS:
            tool = f"link_{n}_{deps}"
            policy = policy.declare(tool, keys[:deps])
            plan = await _plan_at_depth(store, facts[:deps], 1, f"link-{n}-{deps}")
            cases.append(GateCase(n, deps, tool, plan))
    return policy, cases


GATE_WARMUP = 2
SYNC_WARMUP = 1


async def _gate_rows(
    store: AsyncStore,
    policy: Policy,
    cases: list[GateCase],
    directories: Mapping[str, Mapping[str, str]],
    keyring: Keyring,
    repeat: int,
    out: list[dict[str, Any]],
    progress: Progress,
) -> None:
    """Every (path, method) pair checks every case once per round, in rotating order. The rows
    go to `out` when the rounds end, also when they are cut short (Ctrl-C): then they hold the
    rounds that completed."""
    combos = [(path, method) for path in directories for method in ("planfence", "allkeys")]
    https = {
        combo: CountedOwnerHeads(directories[combo[0]], keyring, agent=REQUESTER, timeout=30.0)
        for combo in combos
    }
    spaces = {n: store_key_space(store, f"t{n}/") for n in KEY_SPACES}
    gates: dict[tuple[str, str, int], Gate] = {}
    for (path, method), http in https.items():
        for n in KEY_SPACES:
            source: HeadSource = http if method == "planfence" else AllKeysHeads(http, spaces[n])
            gates[(path, method, n)] = Gate(store, policy, heads=source, agent=REQUESTER)
    samples = {(c.keys, c.deps, p, m): Samples() for c in cases for p, m in combos}
    try:
        for i in range(GATE_WARMUP + repeat):
            for case in cases:
                for path, method in _rotate(combos, i):
                    http = https[(path, method)]
                    before = http.stats.total_bytes
                    t0 = time.perf_counter()
                    verdict = await gates[(path, method, case.keys)].check(case.tool, {}, case.plan)
                    elapsed = time.perf_counter() - t0
                    if verdict.verdict != ALLOW:
                        raise RuntimeError(f"benchmark plan not allowed: {verdict.message}")
                    if i >= GATE_WARMUP:
                        s = samples[(case.keys, case.deps, path, method)]
                        s.seconds.append(elapsed)
                        s.bytes += http.stats.total_bytes - before
                        s.checks += 1
            what = "warm-up" if i < GATE_WARMUP else f"{i - GATE_WARMUP + 1}/{repeat}"
            progress.advance(f"gate checks, round {what}")
    finally:
        out.extend(_gate_table(cases, directories, samples))
        for http in https.values():
            await http.aclose()


def _gate_table(
    cases: list[GateCase],
    directories: Mapping[str, Mapping[str, str]],
    samples: Mapping[tuple[int, int, str, str], Samples],
) -> list[dict[str, Any]]:
    rows = []
    for case in cases:
        for path in directories:
            mine = [samples[(case.keys, case.deps, path, m)] for m in ("planfence", "allkeys")]
            if not all(s.checks for s in mine):
                continue
            row: dict[str, Any] = {"path": path, "keys": case.keys, "deps": case.deps}
            for method, s in zip(("planfence", "allkeys"), mine, strict=True):
                row[f"{method}_p50_ms"] = round(percentile(s.seconds, 50) * 1000, 3)
                row[f"{method}_p95_ms"] = round(percentile(s.seconds, 95) * 1000, 3)
                row[f"{method}_bytes"] = round(s.bytes / s.checks)
            pf = row["planfence_p50_ms"]
            row["stall_ratio_p50"] = round(row["allkeys_p50_ms"] / pf, 3) if pf > 0 else None
            rows.append(row)
    return rows


async def _seed_sync_keys(store: AsyncStore, n: int) -> list[str]:
    """n keys owned by the first owner, short names so the answer grows faster than the ask."""
    keys = [f"s/{i:05d}" for i in range(n)]
    for i, key in enumerate(keys):
        await store.own(key, OWNERS[0])
        await store.put(key, {"i": i}, author=OWNERS[0])
    return keys


def _sync_heads(url: str, keyring: Keyring) -> CountedOwnerHeads:
    # no keep-alive: every sync opens its own TCP connection
    return CountedOwnerHeads(
        {OWNERS[0]: url},
        keyring,
        agent=REQUESTER,
        timeout=60.0,
        limits=httpx.Limits(max_keepalive_connections=0),
    )


async def _one_sync(heads: CountedOwnerHeads, keys: tuple[str, ...]) -> tuple[float, int, int]:
    sent, received = heads.stats.bytes_sent, heads.stats.bytes_received
    t0 = time.perf_counter()
    answers = await heads.heads({OWNERS[0]: keys})
    elapsed = time.perf_counter() - t0
    bad = [a for a in answers.values() if a.error or a.head is None]
    if bad or len(answers) != len(keys):
        raise RuntimeError(f"owner sync failed: {bad[:1]}")
    return elapsed, heads.stats.bytes_sent - sent, heads.stats.bytes_received - received


async def _sync_rows(
    keys: list[str],
    urls: Mapping[str, str],
    losses: Mapping[str, float],
    keyring: Keyring,
    repeat: int,
    out: list[dict[str, Any]],
    progress: Progress,
) -> None:
    """Answer sizes picked from a two-point fit of answer bytes per key; then every path syncs
    every size once per round, in rotating order. Rows go to `out` as in `_gate_rows`."""
    paths = list(urls)
    clients = {p: _sync_heads(urls[p], keyring) for p in paths}
    samples: dict[tuple[int, str], list[float]] = {(k, p): [] for k in SYNC_KIB for p in paths}
    size: dict[int, tuple[int, int]] = {}
    counts: dict[int, int] = {}
    try:
        loop = clients[paths[0]]
        _, _, one = await _one_sync(loop, tuple(keys[:1]))
        _, _, hundred = await _one_sync(loop, tuple(keys[:100]))
        per_key = (hundred - one) / 99
        counts.update(
            (kib, max(1, min(len(keys), 1 + round((kib * 1024 - one) / per_key))))
            for kib in SYNC_KIB
        )
        for i in range(SYNC_WARMUP + repeat):
            for kib in SYNC_KIB:
                for path in _rotate(paths, i + kib):
                    elapsed, sent, received = await _one_sync(
                        clients[path], tuple(keys[: counts[kib]])
                    )
                    size[kib] = (sent, received)
                    if i >= SYNC_WARMUP:
                        samples[(kib, path)].append(elapsed)
            what = "warm-up" if i < SYNC_WARMUP else f"{i - SYNC_WARMUP + 1}/{repeat}"
            progress.advance(f"head syncs, round {what}")
    finally:
        for heads in clients.values():
            await heads.aclose()
        for kib in SYNC_KIB:
            for path in paths:
                s = samples[(kib, path)]
                if not s:
                    continue
                out.append(
                    {
                        "path": path,
                        "loss": losses[path],
                        "state_kib": kib,
                        "keys": counts[kib],
                        "request_bytes": size[kib][0],
                        "answer_bytes": size[kib][1],
                        "p50_ms": round(percentile(s, 50) * 1000, 3),
                        "p95_ms": round(percentile(s, 95) * 1000, 3),
                    }
                )


def _port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def _bench(settings: Settings, store_url: str | None, results: dict[str, Any]) -> None:
    """Fill `results` in; every store, folder, relay and process is released on the way out,
    also when the run is cancelled by Ctrl-C."""
    keyring_text = {a: secrets.token_hex(24) for a in (*OWNERS, REQUESTER)}
    keyring = Keyring(keyring_text, source="<bench>")
    sync_keys_needed = 1 + (max(SYNC_KIB) * 1024) // 60  # answers take > 60 bytes per key
    link, lossy = settings.link(), settings.link(settings.loss)
    relays: list[LinkRelay] = []
    async with AsyncExitStack() as stack:
        target = bench_store(store_url, shared=True)
        stack.callback(target.cleanup)
        results["stores"].append(target.describe())
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="planfence-link-")))
        store = await open_async_store(target.url)
        stack.push_async_callback(store.aclose)
        policy, cases = await _seed_gate_cases(store)
        sync_keys = await _seed_sync_keys(store, sync_keys_needed)
        direct = stack.enter_context(_owner_services(target.url, keyring_text, logs))
        via: dict[str, str] = {}
        for owner, url in direct.items():
            relay = LinkRelay(link, "127.0.0.1", _port_of(url))
            via[owner] = (await stack.enter_async_context(relay)).url
            relays.append(relay)
        lossy_relay = LinkRelay(lossy, "127.0.0.1", _port_of(direct[OWNERS[0]]))
        lossy_url = (await stack.enter_async_context(lossy_relay)).url
        relays.append(lossy_relay)
        # settings last: they read the relays' statistics, also after Ctrl-C
        stack.callback(_link_statistics, results["settings"], settings, link, lossy, relays)
        total = GATE_WARMUP + settings.repeat + SYNC_WARMUP + settings.repeat
        progress = stack.enter_context(Progress("bench link", total))
        await _gate_rows(
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
        await _sync_rows(
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


def describe_trace(s: Mapping[str, Any]) -> str:
    """One line naming the trace a run used (from its settings)."""
    if s.get("trace_kind") == "synthetic":
        name = (
            f"synthetic cellular trace (seed {SYNTHETIC_SEED}, the statistics of {DEFAULT_TRACE}; "
            f"real traces: --trace-up/--trace-down or ${TRACES_ENV})"
        )
    else:
        name = f"{s['trace_up']} and {s['trace_down']}"
    return (
        f"trace: {name}; mean {s['trace_up_mean_mbps']} Mbit/s up, "
        f"{s['trace_down_mean_mbps']} Mbit/s down"
    )


def _pair(p50: float, p95: float) -> str:
    return f"{p50:7.1f} /{p95:7.1f}"


def _print_tables(result: Mapping[str, Any]) -> None:
    print_context(result)
    s = result["settings"]
    print(f"{s['repeat']} timed gate checks and head syncs per row")
    print(describe_trace(s))
    print(
        f"link: {s['delay_ms']:g} ms one way, RTO {s['rto_ms']:g} ms; "
        f"{s.get('trace_time_used_ms', 0) / 1000:.0f} s of trace replayed"
    )
    if "relay_late_p50_ms" in s:
        print(
            f"(the relay wrote packets {s['relay_late_p50_ms']:.2f} ms p50, "
            f"{s['relay_late_p99_ms']:.2f} ms p99 after the model's delivery times)"
        )
    print()
    print("Gate stall per validation (Gate.check wall time, ms p50 / p95) and HTTP bytes")
    print(
        f"{'path':<9} {'keys':>4} {'|D(a)|':>6} {'planfence':>16} {'all-key':>16} "
        f"{'ratio':>6} {'pf bytes':>9} {'all bytes':>9}"
    )
    for r in result["gate"]:
        ratio = f"{r['stall_ratio_p50']:.2f}x" if r["stall_ratio_p50"] is not None else "-"
        print(
            f"{r['path']:<9} {r['keys']:>4} {r['deps']:>6} "
            f"{_pair(r['planfence_p50_ms'], r['planfence_p95_ms']):>16} "
            f"{_pair(r['allkeys_p50_ms'], r['allkeys_p95_ms']):>16} {ratio:>6} "
            f"{r['planfence_bytes']:>9} {r['allkeys_bytes']:>9}"
        )
    if not result["sync"]:
        return
    print()
    print("One authenticated head sync on a fresh TCP connection (ms p50 / p95)")
    paths = list(dict.fromkeys(r["path"] for r in result["sync"]))
    print(
        f"{'state':>6} {'keys':>5} {'ask B':>6} {'answer B':>8} "
        + " ".join(f"{p:>16}" for p in paths)
    )
    by = {(r["state_kib"], r["path"]): r for r in result["sync"]}
    for kib in dict.fromkeys(r["state_kib"] for r in result["sync"]):
        first = by[(kib, paths[0])]
        cells = " ".join(
            f"{_pair(by[(kib, p)]['p50_ms'], by[(kib, p)]['p95_ms']):>16}" for p in paths
        )
        print(
            f"{kib:>4} KiB {first['keys']:>4} {first['request_bytes']:>6} "
            f"{first['answer_bytes']:>8} {cells}"
        )


__all__ = [
    "Direction",
    "Flow",
    "Link",
    "LinkRelay",
    "Packet",
    "Trace",
    "TraceError",
    "TraceQueue",
    "default_rto_ms",
    "split_packets",
]
