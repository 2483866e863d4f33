"""The tables and the figure `bench scale` prints and draws."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from planfence.demos.bench.harness.output import print_context


def print_tables(result: Mapping[str, Any]) -> None:
    print_context(result)
    print(f"{result['repeat']} timed checks per row (allow path, default audit mode)")
    if result["size"]:
        print()
        print("Check latency vs store size (|D(a)| = 4, depth 1; ratios to the smallest store)")
        print(
            f"{'records':>9} {'keys':>7} {'bare p50':>9} {'check p50':>10} {'p99':>9} "
            f"{'p50 vs first':>12} {'p99 vs first':>12}"
        )
        for r in result["size"]:
            print(
                f"{r['records']:>9} {r['keys']:>7} {r['bare_read_p50_ms']:>6.3f} ms "
                f"{r['check_p50_ms']:>7.3f} ms {r['check_p99_ms']:>6.3f} ms "
                f"{r['p50_vs_smallest']:>11.2f}x {r['p99_vs_smallest']:>11.2f}x"
            )
    if result["deps"]:
        print()
        print("Check latency vs |D(a)| (depth 1)")
        print(f"{'|D(a)|':>6} {'bare p50':>9} {'check p50':>10} {'p99':>9}")
        for r in result["deps"]:
            print(
                f"{r['deps']:>6} {r['bare_read_p50_ms']:>6.3f} ms {r['check_p50_ms']:>7.3f} ms "
                f"{r['check_p99_ms']:>6.3f} ms"
            )
        found = result.get("deps_slope_us_per_key")
        if found is not None:
            print(f"slope of the check's p50: {found:.2f} us per key of D(a)")
    if result["processes"]:
        print()
        print(f"Gate processes sharing one store, {result['seconds']:g} s each (|D(a)| = 4)")
        print(f"{'backend':<9} {'processes':>9} {'checks/s':>9} {'p50':>9} {'p99':>9}")
        for r in result["processes"]:
            print(
                f"{r['backend']:<9} {r['processes']:>9} {r['checks_per_s']:>9.0f} "
                f"{r['check_p50_ms']:>6.3f} ms {r['check_p99_ms']:>6.3f} ms"
            )


def plot(result: Mapping[str, Any], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'planfence[bench]'") from None
    fig, (size, deps, procs) = plt.subplots(1, 3, figsize=(16, 4.5))
    rows = result["size"]
    for q in ("p50", "p99"):
        size.plot([r["records"] for r in rows], [r[f"check_{q}_ms"] for r in rows], "o-", label=q)
    size.set_xscale("log")
    size.set_xlabel("records in the store (keys: a tenth)")
    size.set_ylabel("check (ms)")
    size.set_title("store size")
    size.legend()
    rows = result["deps"]
    for q in ("p50", "p99"):
        deps.plot([r["deps"] for r in rows], [r[f"check_{q}_ms"] for r in rows], "o-", label=q)
    deps.set_xlabel("|D(a)|")
    deps.set_ylabel("check (ms)")
    found = result.get("deps_slope_us_per_key")
    deps.set_title("|D(a)|" + (f" (slope {found:.1f} us/key)" if found is not None else ""))
    deps.legend()
    for backend in sorted({r["backend"] for r in result["processes"]}):
        mine = [r for r in result["processes"] if r["backend"] == backend]
        procs.plot([r["processes"] for r in mine], [r["checks_per_s"] for r in mine], "o-")
        procs.lines[-1].set_label(backend)
    procs.set_xlabel("gate processes on one store")
    procs.set_ylabel("checks per second (all processes)")
    procs.set_title("processes")
    if result["processes"]:
        procs.legend()
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
