"""A user-space network emulator: the link model the benchmarks run over a cellular path.

The link emulator runs in user space (no kernel traffic shaping needed): an asyncio TCP relay
listens on a loopback port, forwards to a target (an owner service), and paces each direction by
a mahimahi packet-delivery trace, the format of the public cellular traces (one line = one
opportunity for one 1500-byte packet at that millisecond; the trace loops). The traces come from
`--trace-up/--trace-down`, else `$PLANFENCE_TRACES`, else a synthetic cellular trace with the
statistics of the AT&T LTE driving traces (see `synthetic`); the output names the one used.

The model, per direction (pure code in `trace` and `model`, no clock):
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

Modules: `trace` (mahimahi traces), `synthetic` (the shipped synthetic cellular trace and trace
statistics), `sources` (which trace a run uses: options, `$PLANFENCE_TRACES`, or the synthetic
one), `model` (queue, delay, loss), `relay` (the TCP relay that applies the model).
"""
