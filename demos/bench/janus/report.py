"""What `planfence bench janus` prints: tables per rho, paired differences, the verdict, a plot."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .stats import ABLATIONS, summary

BANNER = (
    "CONTROLLED SIMULATION: a seeded stream of one task family, a curator that also writes "
    "harmful edits, noisy evaluations (no LLM).\nrho = share of harmful edits that are abrupt "
    "rewrites; final accuracy = expected held-out accuracy."
)
TARGET_RHO = 0.8


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.0%}"


def print_tables(rows: Sequence[Mapping[str, Any]]) -> None:
    table = summary(rows)
    for rho in sorted({r["rho"] for r in rows}):
        print(f"rho = {rho}")
        print(f"{'strategy':<24}{'accuracy ± 95% CI':>20}{'cmp/step':>10}{'cost':>8}"
              f"{'deployed':>10}{'rejected':>10}{'harm cmp':>10}{'harm dep':>10}"
              f"{'benign cmp':>12}{'benign rej':>12}")  # fmt: skip
        for (h, name), v in table.items():
            if h != rho:
                continue
            acc = f"{v['accuracy']:.3f} ± {v['ci_half']:.3f}"
            print(
                f"{name:<24}{acc:>20}{v['comparisons_per_step']:>10.3f}{v['cost_proxy']:>8.0f}"
                f"{v['deployed']:>10.1f}{v['rejected']:>10.1f}{_pct(v['harm_compared']):>10}"
                f"{_pct(v['harm_deployed']):>10}{_pct(v['benign_compared']):>12}"
                f"{_pct(v['benign_rejected']):>12}"
            )
        print()


def print_paired(paired: Sequence[Mapping[str, Any]]) -> None:
    print("Paired differences over seeds (a - b, final accuracy, 95% CI):")
    for p in paired:
        print(f"  rho {p['rho']:<4} {p['a'] + ' - ' + p['b']:<38}{p['mean_diff']:>+8.4f}  "
              f"[{p['ci_low']:+.4f}, {p['ci_high']:+.4f}]")  # fmt: skip
    print()


def _diff(paired: Sequence[Mapping[str, Any]], rho: float, a: str, b: str) -> Mapping[str, Any]:
    for p in paired:
        if p["rho"] == rho and p["a"] == a and p["b"] == b:
            return p
    nan = math.nan
    return {"mean_diff": nan, "ci_low": nan, "ci_high": nan}


def targets(
    rows: Sequence[Mapping[str, Any]], paired: Sequence[Mapping[str, Any]], rho: float
) -> list[tuple[str, bool, str]]:
    """The issue's four targets at one rho: (name, holds, measured)."""
    table = summary(rows)
    jp = _diff(paired, rho, "janus", "plain")
    jr = _diff(paired, rho, "janus", "random")
    jq = _diff(paired, rho, "janus", "periodic")
    aj = _diff(paired, rho, "always", "janus")
    half = (aj["ci_high"] - aj["ci_low"]) / 2
    j_cps = table.get((rho, "janus"), {}).get("comparisons_per_step", math.nan)
    a_cps = table.get((rho, "always"), {}).get("comparisons_per_step", math.nan)
    abl = {a: _diff(paired, rho, a, "janus")["mean_diff"] for a in ABLATIONS}
    lowest = min(abl, key=lambda a: abl[a]) if abl else ""
    return [
        (
            "Janus - plain >= 0.027 with CI low > 0",
            jp["mean_diff"] >= 0.027 and jp["ci_low"] > 0,
            f"{jp['mean_diff']:+.4f} [{jp['ci_low']:+.4f}, {jp['ci_high']:+.4f}]",
        ),
        (
            "Janus >= random and >= periodic (CI low >= -0.005)",
            jr["ci_low"] >= -0.005 and jq["ci_low"] >= -0.005,
            f"vs random {jr['mean_diff']:+.4f} (low {jr['ci_low']:+.4f}), "
            f"vs periodic {jq['mean_diff']:+.4f} (low {jq['ci_low']:+.4f})",
        ),
        (
            "always - Janus <= max(0.01, CI half) with <= 50% of its comparisons",
            aj["mean_diff"] <= max(0.01, half) and j_cps <= 0.5 * a_cps,
            f"{aj['mean_diff']:+.4f} (half {half:.4f}), {j_cps:.3f} vs {a_cps:.3f} cmp/step",
        ),
        (
            "every set ablation <= Janus, no-fresh lowest",
            all(v <= 0 for v in abl.values()) and lowest == "janus-no-fresh",
            ", ".join(f"{a.removeprefix('janus-')} {v:+.4f}" for a, v in abl.items()),
        ),
    ]


def verdict_lines(
    rows: Sequence[Mapping[str, Any]], paired: Sequence[Mapping[str, Any]]
) -> list[str]:
    lines = []
    for rho in sorted({r["rho"] for r in rows}):
        checks = targets(rows, paired, rho)
        held = sum(ok for _, ok, _ in checks)
        where = " (the target rho)" if rho == TARGET_RHO else " (reported, not a target)"
        lines.append(f"Targets at rho = {rho}{where}: {held} of {len(checks)} hold")
        for name, ok, measured in checks:
            lines.append(f"  [{'holds' if ok else 'FAILS'}] {name}: {measured}")
    return lines


def print_calibration(cal: Mapping[str, Any]) -> None:
    print(f"Calibration (paper: memory-free 0.727, DC-RS plain 0.795, with Janus 0.832): "
          f"memory-free {cal['memory_free']}, plain {cal['plain']}, "
          f"harm-free ceiling {cal['ceiling']}")  # fmt: skip
    for rho, c in cal["by_rho"].items():
        print(f"  rho {rho}: memory-free {c['memory_free']}, plain {c['plain']}, "
              f"ceiling {c['ceiling']}")  # fmt: skip
    print()


def plot(doc: Mapping[str, Any], path: str) -> None:
    """Accuracy along the stream, and accuracy against comparisons per step, for each rho."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'planfence[bench]'") from None
    rhos = sorted(doc["curves"]["accuracy"], key=float)
    table = summary(doc["rows"])
    fig, axes = plt.subplots(2, len(rhos), figsize=(5 * len(rhos), 8), squeeze=False)
    steps = doc["curves"]["steps"]
    for col, rho in enumerate(rhos):
        top, bottom = axes[0][col], axes[1][col]
        for name, curve in doc["curves"]["accuracy"][rho].items():
            if name in ("plain", "janus", "always", "random", "periodic", "ceiling"):
                top.plot(steps, curve, label=name)
        top.set_title(f"rho = {rho}: held-out accuracy along the stream")
        top.set_xlabel("stream step")
        top.set_ylabel("expected accuracy (mean over seeds)")
        top.legend(fontsize=8)
        for (h, name), v in table.items():
            if h == float(rho) and name not in ("memory-free", "ceiling"):
                bottom.scatter(v["comparisons_per_step"], v["accuracy"])
                bottom.annotate(name, (v["comparisons_per_step"], v["accuracy"]), fontsize=7)
        bottom.set_title(f"rho = {rho}: accuracy vs comparisons")
        bottom.set_xlabel("comparisons per post-warm-up step")
        bottom.set_ylabel("final accuracy")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
