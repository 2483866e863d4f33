"""The tables `bench link` prints."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from planfence.demos.bench.harness.output import print_context
from planfence.demos.bench.netem.sources import describe_trace


def _pair(p50: float, p95: float) -> str:
    return f"{p50:7.1f} /{p95:7.1f}"


def print_tables(result: Mapping[str, Any]) -> None:
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
