"""`planfence bench link`: the gate's stall and traffic on loopback vs an emulated cellular link.

The link is the user-space emulator in `netem`: an asyncio TCP relay on a loopback port,
forwarding to an owner service and pacing each direction by a mahimahi packet-delivery trace
(`--trace-up/--trace-down`, else `$PLANFENCE_TRACES`, else the shipped synthetic cellular trace
with the statistics of the AT&T LTE driving traces); the output names the trace used.

The benchmark, in one run, interleaved:
- Gate stall: `Gate.check` wall time on the allow path (audited, as shipped) with heads from two
  HTTP owner services, asked directly on loopback and through the emulated link, for planfence
  (D(a) only) and the equally safe batch all-key check, at 8 / 32 / 128 shared keys and
  |D(a)| = 1, 4; plus HTTP bytes per validation.
- One sync: one authenticated owner-head request on a fresh TCP connection whose signed answer
  is about 1, 4, 16, 64 KiB, on loopback and through the link with and without loss.
Modules: `command` (options, settings, the run), `rows` (the gate and sync measurements),
`report` (the tables).
"""
