"""Link traces for the benchmarks over the emulated cellular link, and a synthetic one.

Where `planfence bench link` and `bench replay` get their traces, in this order:

1. `--trace-up FILE --trace-down FILE`: any mahimahi packet-delivery traces (one line = one
   opportunity for one 1500-byte packet at that millisecond; the trace loops).
2. `$PLANFENCE_TRACES`: a folder holding `ATT-LTE-driving.up` and `ATT-LTE-driving.down`, the
   AT&T LTE traces published with mahimahi (not shipped with planfence).
3. Otherwise the synthetic cellular trace generated here, so the benchmarks run on any machine.
   The output and the JSON say which trace was used.

The synthetic trace (`synthetic_times`) is generated from a seed, in three layers per direction:

- Capacity per second: a first-order autoregressive process around a median rate (stationary,
  unit variance, lag-1 correlation `phi`), scaled by `spread` and clipped to [floor, cap]. This
  gives the slow swings of a moving phone's capacity.
- Outages: an on/off Markov chain per second; an outage starts with probability `outage_p`
  each second and lasts `outage_s` seconds on average (geometric). No capacity at all.
- Fades: short idle gaps of 100 ms plus an exponential extra (mean `fade_ms`), `fades_per_min`
  per minute on average, at uniform times; and a log-normal jitter of each 100 ms slot's rate
  (`jitter`, mean-preserving).

Opportunities are then laid out by accumulating the per-millisecond rate and emitting one packet
each time the running total crosses an integer (from a random phase), which spreads them evenly,
as a cellular scheduler grants them, rather than in Poisson clumps.

The parameters were fitted to the AT&T LTE driving traces. Their statistics (1-second throughput
in Mbit/s; "idle gaps" are gaps of at least 100 ms between delivery opportunities), measured
with `trace_stats` on the real traces and on the synthetic ones (600 s, seed 6):

    ATT-LTE-driving        mean   p10   p50   p90  cv(1s)  ac1(1s)  gaps/min  idle 100ms  max gap
    up,   real (1012 s)   0.834 0.012 1.044 1.164  0.486    0.842      16.7      14.8 %    78.3 s
    up,   synthetic       0.826 0.000 1.008 1.140  0.467    0.820      12.6      17.7 %    39.0 s
    down, real  (786 s)   5.173 1.362 5.412 8.622  0.557    0.925      10.2       5.1 %     1.5 s
    down, synthetic       5.325 0.312 5.580 9.157  0.564    0.906       9.1       4.1 %     1.6 s

(cv: coefficient of variation; ac1: lag-1 autocorrelation of the 1-second series; idle 100ms:
share of 100 ms windows without any opportunity.) The real uplink's longest gap is one 78 s
outage; the synthetic chain has outages of the same kind, shorter. The synthetic downlink's
slowest tenth of seconds (p10) is slower than the real one's; the rest matches closely. Other
traces published with mahimahi differ a lot (T-Mobile LTE: 13 Mbit/s up, 17 down), so the
synthetic trace stands for this one setting only; pass real traces for anything else.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from planfence.shared_memory.extras import extra_imports

with extra_imports("bench", "the synthetic network trace"):
    import numpy as np


MTU_BITS = 1500 * 8
SYNTHETIC_SEED = 6
SYNTHETIC_SECONDS = 600
IDLE_GAP_MS = 100


# `trace_stats` of ATT-LTE-driving.{up,down} as published with mahimahi: what the synthetic trace
# is fitted to (the table above), kept here so a test holds the generator to it.
ATT_LTE_DRIVING_MEASURED: Mapping[str, Mapping[str, float]] = {
    "up": {
        "seconds": 1012.472,
        "mean_mbps": 0.834,
        "p10_mbps": 0.012,
        "p50_mbps": 1.044,
        "p90_mbps": 1.164,
        "cv_1s": 0.486,
        "ac1_1s": 0.842,
        "idle_gaps_per_min": 16.652,
        "idle_100ms_share": 0.148,
        "max_gap_s": 78.319,
    },
    "down": {
        "seconds": 786.112,
        "mean_mbps": 5.173,
        "p10_mbps": 1.362,
        "p50_mbps": 5.412,
        "p90_mbps": 8.622,
        "cv_1s": 0.557,
        "ac1_1s": 0.925,
        "idle_gaps_per_min": 10.228,
        "idle_100ms_share": 0.051,
        "max_gap_s": 1.515,
    },
}


@dataclass(frozen=True)
class Profile:
    """Parameters of one direction of the synthetic trace (rates in Mbit/s)."""

    median: float
    spread: float
    phi: float
    floor: float
    cap: float
    outage_p: float
    outage_s: float
    fades_per_min: float
    fade_ms: float
    jitter: float


# Fitted to ATT-LTE-driving.{up,down} (see the module docstring).
ATT_LTE_DRIVING: Mapping[str, Profile] = {
    "up": Profile(
        median=1.25,
        spread=0.35,
        phi=0.95,
        floor=0.0625,
        cap=1.1,
        outage_p=0.01,
        outage_s=10.0,
        fades_per_min=17.0,
        fade_ms=150.0,
        jitter=0.15,
    ),
    "down": Profile(
        median=5.5,
        spread=2.6,
        phi=0.98,
        floor=0.275,
        cap=11.0,
        outage_p=0.004,
        outage_s=2.0,
        fades_per_min=11.0,
        fade_ms=250.0,
        jitter=0.25,
    ),
}


def synthetic_times(
    direction: str, *, seed: int = SYNTHETIC_SEED, seconds: int = SYNTHETIC_SECONDS
) -> list[int]:
    """The synthetic trace for `direction` ("up" or "down"): sorted millisecond timestamps, one
    per delivery opportunity, the same for the same seed on every machine."""
    profile = ATT_LTE_DRIVING[direction]
    if seconds < 1:
        raise ValueError("a trace needs at least one second")
    rng = np.random.default_rng([seed, 0 if direction == "up" else 1])
    p = profile

    # capacity per second: AR(1), unit variance, around the median
    noise = rng.standard_normal(seconds)
    level = np.empty(seconds)
    level[0] = noise[0]
    keep = math.sqrt(1.0 - p.phi**2)
    for i in range(1, seconds):
        level[i] = p.phi * level[i - 1] + keep * noise[i]
    rate = np.clip(p.median + p.spread * level, p.floor, p.cap)

    # outages: on/off chain per second
    draws = rng.random(seconds)
    out = False
    for i in range(seconds):
        out = bool(draws[i] >= 1.0 / p.outage_s) if out else bool(draws[i] < p.outage_p)
        if out:
            rate[i] = 0.0

    # 100 ms slots with mean-preserving log-normal jitter, then per millisecond
    slots = np.repeat(rate, 10) * np.exp(rng.normal(-(p.jitter**2) / 2.0, p.jitter, seconds * 10))
    per_ms = np.repeat(slots, 100) * 1e6 / MTU_BITS / 1000.0  # packets per millisecond

    # fades: idle gaps of 100 ms and more
    fades = rng.poisson(p.fades_per_min * seconds / 60.0)
    starts = rng.integers(0, seconds * 1000, fades)
    lengths = IDLE_GAP_MS + rng.exponential(p.fade_ms, fades).astype(np.int64)
    for start, length in zip(starts, lengths, strict=True):
        per_ms[start : start + length] = 0.0

    # even spacing: one opportunity each time the running total crosses an integer
    total = np.floor(np.cumsum(per_ms) + rng.random()).astype(np.int64)
    counts = np.diff(total, prepend=0)  # the phase is below 1: the total starts at 0
    times = np.repeat(np.arange(1, seconds * 1000 + 1), counts)
    out_times = [int(t) for t in times]
    if not out_times or out_times[-1] < seconds * 1000:
        out_times.append(seconds * 1000)  # the trace loops at its last timestamp
    return out_times


def synthetic_source(direction: str, seed: int = SYNTHETIC_SEED) -> str:
    return f"synthetic cellular trace ({direction}, ATT-LTE-driving statistics, seed {seed})"


def trace_stats(times: Sequence[int]) -> dict[str, float]:
    """Throughput and burstiness of a trace: mean and 1-second percentiles in Mbit/s, the
    1-second series' coefficient of variation and lag-1 autocorrelation, idle gaps (>= 100 ms
    between opportunities) per minute, the share of 100 ms windows without an opportunity, and
    the longest gap in seconds."""
    t = np.asarray(times, dtype=np.int64)
    if t.size == 0 or t[-1] <= 0:
        raise ValueError("an empty trace has no statistics")
    duration = int(t[-1])
    per_ms = np.bincount(t, minlength=duration + 1)[: duration + 1]
    whole = (per_ms.size // 1000) * 1000
    per_s = per_ms[:whole].reshape(-1, 1000).sum(axis=1) * MTU_BITS / 1e6
    tenth = (per_ms.size // 100) * 100
    per_100 = per_ms[:tenth].reshape(-1, 100).sum(axis=1)
    busy = np.unique(t)
    gaps = np.diff(busy) if busy.size > 1 else np.array([0])
    varies = per_s.size > 2 and per_s[:-1].std() > 0 and per_s[1:].std() > 0
    ac1 = float(np.corrcoef(per_s[:-1], per_s[1:])[0, 1]) if varies else float("nan")
    return {
        "seconds": duration / 1000.0,
        "mean_mbps": t.size * MTU_BITS / duration / 1000.0,
        "p10_mbps": float(np.percentile(per_s, 10)),
        "p50_mbps": float(np.percentile(per_s, 50)),
        "p90_mbps": float(np.percentile(per_s, 90)),
        "cv_1s": float(per_s.std() / per_s.mean()) if per_s.mean() > 0 else float("nan"),
        "ac1_1s": ac1,
        "idle_gaps_per_min": float((gaps >= IDLE_GAP_MS).sum() / (duration / 60000.0)),
        "idle_100ms_share": float((per_100 == 0).mean()),
        "max_gap_s": float(gaps.max() / 1000.0),
    }
