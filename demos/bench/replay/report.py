"""What `bench replay` reports: the crossover and safety summaries, the tables, and the figure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from planfence.demos.bench.harness.output import print_context
from planfence.demos.bench.netem.sources import describe_trace

from .executors import EXECUTORS, SAFE
from .schedule import crossover

CLAIM_RATE = 4.0


def summarise(results: dict[str, Any], paths: Sequence[str]) -> None:
    """Crossover and safety from the rows measured (all of them, or those before Ctrl-C)."""
    measured = [p for p in paths if any(r["path"] == p for r in results["rows"])]
    results["crossover"] = crossovers(results["rows"], measured)
    results["safety"] = safety(results["rows"])


def crossovers(rows: list[dict[str, Any]], paths: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path in paths:
        by = {(r["rate"], r["executor"]): r for r in rows if r["path"] == path}
        rates = sorted({rate for rate, _ in by})
        entry: dict[str, Any] = {}
        for rival in ("eager", "allkeys"):
            pts = [
                (r, by[(r, "planfence")]["stall_mean_ms"], by[(r, rival)]["stall_mean_ms"])
                for r in rates
            ]
            grid, interp = crossover(pts)
            entry[f"vs_{rival}"] = grid
            entry[f"vs_{rival}_interpolated"] = interp
            entry[f"planfence_lower_than_{rival}_at"] = [r for r, p, q in pts if p < q]
        stall = {
            r: (by[(r, "planfence")]["stall_mean_ms"], by[(r, "eager")]["stall_mean_ms"])
            for r in rates
        }
        high = [stall[r] for r in rates if r >= CLAIM_RATE]
        low = stall[rates[0]]
        entry["eager_lower_at_lowest_rate"] = low[1] < low[0]
        entry["planfence_lower_than_eager_from_4"] = bool(high) and all(p < q for p, q in high)
        out[path] = entry
    return out


def safety(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"scheduled_actions": {}, "invalid": {}, "replans": {}, "blocks": {}}
    for ex in EXECUTORS:
        mine = [r for r in rows if r["executor"] == ex]
        out["scheduled_actions"][ex] = sum(r["actions"] for r in mine)
        out["invalid"][ex] = sum(r["invalid"] for r in mine)
        out["replans"][ex] = sum(r["replans"] for r in mine)
        out["blocks"][ex] = sum(r["blocks"] for r in mine)
    out["stale_plans_scheduled"] = sum(
        r["expected_stale"] for r in rows if r["executor"] == "freshness"
    )
    out["exact_lineage_invalid"] = sum(out["invalid"][ex] for ex in SAFE)
    return out


def _fmt_rate(rate: float) -> str:
    return f"{rate:g}"


def print_tables(result: Mapping[str, Any]) -> None:
    print_context(result)
    s = result["settings"]
    print(
        f"Controlled replay: {s['actions']} actions per rate and executor, {s['keys']} keys, "
        f"{s['owners']} owners, {s['replicas']} executor replicas, {s['value_bytes']} B values"
    )
    if "trace_up" in s:
        print(f"att {describe_trace(s)}")
    if "relay_late_p50_ms" in s:
        print(
            f"att link: {s['delay_ms']:g} ms one way; relay late "
            f"{s['relay_late_p50_ms']:.2f} ms p50 / {s['relay_late_p99_ms']:.2f} ms p99"
        )
    for path in result["crossover"]:
        rows = [r for r in result["rows"] if r["path"] == path]
        by = {(r["rate"], r["executor"]): r for r in rows}
        rates = sorted({r["rate"] for r in rows})
        print()
        print(f"[{path}] coordination stall per action, ms: mean (p50)")
        print(f"{'rate':>6} " + " ".join(f"{ex:>17}" for ex in EXECUTORS))
        for rate in rates:
            cells = " ".join(
                f"{by[(rate, ex)]['stall_mean_ms']:>8.2f} ({by[(rate, ex)]['stall_p50_ms']:>6.2f})"
                for ex in EXECUTORS
            )
            print(f"{_fmt_rate(rate):>6} {cells}")
        c = result["crossover"][path]
        grid = c["vs_eager"]
        where = "never" if grid is None else f"r >= {_fmt_rate(grid)}"
        if c["vs_eager_interpolated"] is not None:
            where += f" (interpolated {c['vs_eager_interpolated']:g})"
        print(
            f"planfence below eager from: {where}; below all-key at rates: "
            f"{', '.join(_fmt_rate(r) for r in c['planfence_lower_than_allkeys_at']) or 'none'}"
        )
        print()
        print(f"[{path}] per action: HTTP messages / bytes; counts: replans, blocks, invalid")
        print(
            f"{'rate':>6} {'executor':<10} {'msgs':>6} {'bytes':>8} {'act ms':>8} {'upd ms':>8} "
            f"{'replans':>7} {'blocks':>6} {'invalid':>7}"
        )
        for rate in rates:
            for ex in EXECUTORS:
                r = by[(rate, ex)]
                print(
                    f"{_fmt_rate(rate):>6} {ex:<10} {r['messages_per_action']:>6.2f} "
                    f"{r['bytes_per_action']:>8.0f} {r['action_path_mean_ms']:>8.2f} "
                    f"{r['update_path_mean_ms']:>8.2f} {r['replans']:>7} {r['blocks']:>6} "
                    f"{r['invalid']:>7}"
                )
    odd = [
        f"{r['path']} r={_fmt_rate(r['rate'])} {r['executor']}: {r['block_reasons']}"
        for r in result["rows"]
        if set(r["block_reasons"]) - {"stale_after_replan"}
    ]
    if odd:
        print()
        print("Blocks other than an overtaken replan (failing closed): " + "; ".join(odd))
    safety = result["safety"]
    print()
    print(
        "Invalid actions (judged from the store's history): "
        + ", ".join(
            f"{ex} {safety['invalid'][ex]}/{safety['scheduled_actions'][ex]}" for ex in EXECUTORS
        )
    )


def plot(result: Mapping[str, Any], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import NullFormatter, ScalarFormatter
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'planfence[bench]'") from None
    paths = list(result["crossover"])
    fig, axes = plt.subplots(1, len(paths), figsize=(6 * len(paths), 4.5), squeeze=False)
    for ax, name in zip(axes[0], paths, strict=True):
        rows = [r for r in result["rows"] if r["path"] == name]
        for ex in EXECUTORS:
            mine = sorted((r["rate"], r["stall_mean_ms"]) for r in rows if r["executor"] == ex)
            ax.plot([x for x, _ in mine], [y for _, y in mine], marker="o", label=ex)
        cross = result["crossover"][name]
        at = cross["vs_eager_interpolated"] or cross["vs_eager"]
        if at:
            ax.axvline(at, color="grey", linestyle=":", label=f"crossover ~{at:g}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(ScalarFormatter())
        ax.yaxis.set_minor_formatter(NullFormatter())
        rates = sorted({r["rate"] for r in rows})
        ax.set_xticks(rates, [f"{r:g}" for r in rates])
        ax.set_xlabel("updates per action")
        ax.set_ylabel("coordination stall per action (ms, mean)")
        ax.set_title(name)
        ax.legend()
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
