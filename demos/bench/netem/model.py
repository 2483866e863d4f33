"""The pure link model, per direction: a trace-paced bottleneck queue, propagation delay, and
loss as retransmission delay (no clock, no sockets; see `netem`)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from .trace import MTU, Trace

DEFAULT_DELAY_MS = 20.0
MIN_RTO_MS = 200.0


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
