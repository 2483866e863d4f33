"""The link model without a clock: trace looping, byte credit, delay, loss as delay, ordering.

Every expected time below is worked out by hand from the trace; times are in milliseconds.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from planfence.demos.bench.netem.model import (
    Direction,
    Flow,
    TraceQueue,
    default_rto_ms,
    split_packets,
)
from planfence.demos.bench.netem.trace import Trace, TraceError


def departures(queue: TraceQueue, sends: list[tuple[int, float]]) -> list[float]:
    return [queue.drain(size, at) for size, at in sends]


def test_trace_parses_mahimahi_lines_and_loops_with_its_last_timestamp() -> None:
    trace = Trace.parse("3\n4\n\n")
    assert trace.times == (3, 4)
    assert trace.period == 4
    # opportunities 3, 4 | 7, 8 | 11, 12 ...
    assert [trace.at(i) for i in range(6)] == [3, 4, 7, 8, 11, 12]
    assert trace.first_at_or_after(0) == 0
    assert trace.first_at_or_after(4) == 1
    assert trace.first_at_or_after(4.5) == 2
    assert trace.first_at_or_after(9) == 4
    assert trace.first_at_or_after(0, min_index=3) == 3


def test_a_one_line_trace_is_one_packet_per_millisecond() -> None:
    trace = Trace.parse("1")
    assert [trace.at(i) for i in range(4)] == [1, 2, 3, 4]
    assert trace.first_at_or_after(1.5) == 1  # the opportunity at 2 ms
    assert trace.mean_mbps == pytest.approx(12.0)


def test_equal_times_across_the_loop_boundary_are_both_opportunities() -> None:
    trace = Trace.parse("0\n5")
    # 0, 5 | 5, 10 | 10, 15: the end of one loop and the start of the next coincide
    assert [trace.at(i) for i in range(6)] == [0, 5, 5, 10, 10, 15]
    assert trace.first_at_or_after(5) == 1
    assert trace.first_at_or_after(10) == 3


@pytest.mark.parametrize(
    ("text", "why"),
    [("", "no delivery"), ("0\n0", "after 0"), ("5\n3", "non-decreasing"), ("1\nx", "not a")],
)
def test_unusable_traces_are_refused(text: str, why: str) -> None:
    with pytest.raises(TraceError, match=why):
        Trace.parse(text)


def test_trace_load_reads_a_file_and_names_it_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "fixed.up"
    path.write_text("1\n")
    assert Trace.load(path).times == (1,)
    with pytest.raises(TraceError, match="cannot read trace"):
        Trace.load(tmp_path / "missing.up")


def test_bytes_are_split_into_mtu_packets() -> None:
    assert split_packets(0) == []
    assert split_packets(1) == [1]
    assert split_packets(1500) == [1500]
    assert split_packets(4000) == [1500, 1500, 1000]
    assert split_packets(3000) == [1500, 1500]
    assert split_packets(250, mtu=100) == [100, 100, 50]


def test_queue_serves_full_packets_one_opportunity_each_and_the_trace_loops() -> None:
    queue = TraceQueue(Trace.parse("3\n4"))  # opportunities 3, 4, 7, 8, 11 ...
    assert departures(queue, [(1500, 0)] * 5) == [3, 4, 7, 8, 11]


def test_several_opportunities_in_one_millisecond() -> None:
    queue = TraceQueue(Trace.parse("5\n5\n5\n10"))  # 5, 5, 5, 10 | 15, 15, 15, 20
    assert departures(queue, [(1500, 0)] * 6) == [5, 5, 5, 10, 15, 15]


def test_small_packets_share_an_opportunity_and_large_ones_span_two() -> None:
    queue = TraceQueue(Trace.parse("1"))
    # two 100-byte packets fit in the 10 ms opportunity; 1400 more need 1300 of it + 100 of 11 ms
    assert departures(queue, [(100, 10), (100, 10), (1400, 10), (1500, 10)]) == [10, 10, 11, 12]


def test_credit_of_an_opportunity_that_found_the_queue_empty_is_lost() -> None:
    queue = TraceQueue(Trace.parse("1"))
    assert queue.drain(100, 10) == 10
    # the 10 ms opportunity had 1400 bytes left, but this packet only arrives at 10.5 ms
    assert queue.drain(100, 10.5) == 11


def test_a_backlog_delays_later_arrivals_fifo() -> None:
    queue = TraceQueue(Trace.parse("10"))  # one packet every 10 ms
    assert departures(queue, [(1500, 0), (1500, 1), (1500, 2), (1500, 35)]) == [10, 20, 30, 40]


def test_packet_sizes_outside_one_mtu_are_refused() -> None:
    queue = TraceQueue(Trace.parse("1"))
    for size in (0, 1501):
        with pytest.raises(ValueError, match="packet size"):
            queue.drain(size, 0)


def test_direction_adds_the_propagation_delay_to_each_packet() -> None:
    link = Direction(Trace.parse("1"), delay_ms=20)
    packets = link.send(4000, 0)
    assert [p.size for p in packets] == [1500, 1500, 1000]
    assert [p.departure_ms for p in packets] == [1, 2, 3]
    assert [p.delivery_ms for p in packets] == [21, 22, 23]
    assert link.packets == 3 and link.lost == 0


def test_a_new_connection_waits_for_its_handshake() -> None:
    link = Direction(Trace.parse("1"), delay_ms=20)
    flow = Flow(not_before_ms=40)  # one base round trip after it was opened at 0
    (packet,) = link.send(100, 0, flow)
    assert packet.arrival_ms == 0  # it holds its place in the shared queue
    assert packet.departure_ms == 40  # but leaves only once the handshake is done
    assert packet.delivery_ms == 60


def test_a_handshake_does_not_hold_back_other_connections() -> None:
    link = Direction(Trace.parse("1"), delay_ms=20)
    link.send(100, 0, Flow(not_before_ms=40))  # a new connection, still in its handshake
    (other,) = link.send(100, 1, Flow())  # an open connection writes right after
    assert other.departure_ms == 1  # shares the first opportunity; not held to 40
    assert other.delivery_ms == 21


def test_default_rto_is_200_ms_or_twice_the_round_trip() -> None:
    assert default_rto_ms(20) == 200  # RTT 40 ms
    assert default_rto_ms(50) == 200  # RTT 100 ms
    assert default_rto_ms(100) == 400  # RTT 200 ms


def test_seeded_loss_costs_one_timeout_per_loss_and_holds_back_later_bytes() -> None:
    # random.Random(1) draws 0.134, 0.847, 0.764, 0.255, 0.495, 0.449: with loss 0.3 the
    # packets are lost once, never, once, never
    draws = random.Random(1)
    assert [round(draws.random(), 3) for _ in range(6)] == [
        0.134,
        0.847,
        0.764,
        0.255,
        0.495,
        0.449,
    ]
    link = Direction(Trace.parse("1"), delay_ms=20, loss=0.3, seed=1)
    flow = Flow()
    packets = link.send(6000, 0, flow)
    assert [p.departure_ms for p in packets] == [1, 2, 3, 4]
    assert [p.losses for p in packets] == [1, 0, 1, 0]
    # 1 + 20 + 200; 22 waits for the first; 3 + 20 + 200; 24 waits for the third
    assert [p.delivery_ms for p in packets] == [221, 221, 223, 223]
    assert link.lost == 2
    assert flow.last_delivery_ms == 223


def test_repeated_loss_of_one_packet_doubles_the_timer() -> None:
    # random.Random(4) draws 0.236, 0.103, 0.396: lost, lost again, then through
    link = Direction(Trace.parse("1"), delay_ms=20, loss=0.3, rto_ms=100, seed=4)
    (packet,) = link.send(1500, 0)
    assert packet.losses == 2
    assert packet.delivery_ms == 1 + 20 + 100 + 200


def test_the_same_seed_gives_the_same_deliveries() -> None:
    def run(seed: int) -> list[float]:
        link = Direction(Trace.parse("2\n2\n7"), delay_ms=5, loss=0.2, seed=seed)
        flow = Flow()
        return [p.delivery_ms for t in range(0, 200, 10) for p in link.send(2000, t, flow)]

    assert run(42) == run(42)
    assert run(42) != run(43)


def test_no_loss_means_deliveries_follow_departures() -> None:
    link = Direction(Trace.parse("1"), delay_ms=0, loss=0.0, seed=9)
    assert [p.delivery_ms for p in link.send(3000, 5)] == [5, 6]


def test_each_connection_keeps_its_own_order_on_a_shared_queue() -> None:
    link = Direction(Trace.parse("1"), delay_ms=10, loss=0.3, seed=1)
    a, b = Flow(), Flow()
    (pa,) = link.send(1500, 0, a)  # lost once: 1 + 10 + 200
    (pb,) = link.send(1500, 0, b)  # not lost: 2 + 10, not held back by the other connection
    assert (pa.delivery_ms, pb.delivery_ms) == (211, 12)


@pytest.mark.parametrize("kwargs", [{"loss": 1.0}, {"loss": -0.1}, {"delay_ms": -1}])
def test_direction_refuses_impossible_settings(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        Direction(Trace.parse("1"), **kwargs)
