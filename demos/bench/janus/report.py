"""What `planfence bench janus` prints: tables per rho, paired differences, the verdict, a plot."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .stats import ABLATIONS, cells, summary

BANNER = (
    "CONTROLLED SIMULATION: a seeded stream of one task family, a curator that also writes "
    "harmful edits, evaluations by a latent threshold per task (no LLM).\nrho = share of "
    "harmful edits that are abrupt rewrites; R = eval_redraw, the chance an evaluation draws "
    "afresh (0 paired, 1 independent); final accuracy = expected held-out accuracy."
)
TARGET_RHO = 0.8
TARGET_REDRAW = 0.0
Cell = tuple[float, float]


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.0%}"


def print_tables(rows: Sequence[Mapping[str, Any]]) -> None:
    table = summary(rows)
    for redraw, rho in cells(rows):
        print(f"R = {redraw}, rho = {rho}")
        print(f"{'strategy':<24}{'accuracy ± 95% CI':>20}{'cmp/step':>10}{'cost':>8}"
              f"{'deployed':>10}{'rejected':>10}{'harm cmp':>10}{'harm dep':>10}"
              f"{'benign cmp':>12}{'benign rej':>12}")  # fmt: skip
        for (r, h, name), v in table.items():
            if (r, h) != (redraw, rho):
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
        where = f"R {p.get('eval_redraw', 1.0):<4} rho {p['rho']:<4}"
        print(f"  {where} {p['a'] + ' - ' + p['b']:<38}{p['mean_diff']:>+8.4f}  "
              f"[{p['ci_low']:+.4f}, {p['ci_high']:+.4f}]")  # fmt: skip
    print()


def _diff(paired: Sequence[Mapping[str, Any]], cell: Cell, a: str, b: str) -> Mapping[str, Any]:
    for p in paired:
        if (p.get("eval_redraw", 1.0), p["rho"]) == cell and p["a"] == a and p["b"] == b:
            return p
    nan = math.nan
    return {"mean_diff": nan, "ci_low": nan, "ci_high": nan}


def _show(p: Mapping[str, Any]) -> str:
    return f"{p['mean_diff']:+.4f} [{p['ci_low']:+.4f}, {p['ci_high']:+.4f}]"


def targets(
    rows: Sequence[Mapping[str, Any]], paired: Sequence[Mapping[str, Any]], cell: Cell
) -> list[tuple[str, bool, str]]:
    """The paper's four claims in one (R, rho) cell: (name, holds, measured)."""
    table = summary(rows)
    jp = _diff(paired, cell, "janus", "plain")
    jr = _diff(paired, cell, "janus", "random")
    jq = _diff(paired, cell, "janus", "periodic")
    aj = _diff(paired, cell, "always", "janus")
    j_cps = table.get((*cell, "janus"), {}).get("comparisons_per_step", math.nan)
    a_cps = table.get((*cell, "always"), {}).get("comparisons_per_step", math.nan)
    abl = {a: _diff(paired, cell, a, "janus") for a in ABLATIONS}
    return [
        (
            "Janus - plain >= +0.027 with CI low > 0",
            jp["mean_diff"] >= 0.027 and jp["ci_low"] > 0,
            _show(jp),
        ),
        (
            "always - Janus <= 0.01 with Janus at <= 40% of always's comparisons",
            aj["mean_diff"] <= 0.01 and j_cps <= 0.4 * a_cps,
            f"{_show(aj)}, {j_cps:.3f} vs {a_cps:.3f} cmp/step",
        ),
        (
            "Janus > random and > periodic at its rate (CI low > 0)",
            jr["ci_low"] > 0 and jq["ci_low"] > 0,
            f"vs random {_show(jr)}, vs periodic {_show(jq)}",
        ),
        (
            "every evaluation-set ablation below Janus",
            all(v["mean_diff"] < 0 for v in abl.values()),
            ", ".join(f"{a.removeprefix('janus-')} {_show(v)}" for a, v in abl.items()),
        ),
    ]


def verdict_lines(
    rows: Sequence[Mapping[str, Any]], paired: Sequence[Mapping[str, Any]]
) -> list[str]:
    lines = []
    for cell in cells(rows):
        checks = targets(rows, paired, cell)
        held = sum(ok for _, ok, _ in checks)
        target = cell == (TARGET_REDRAW, TARGET_RHO)
        where = " (the target cell)" if target else " (reported, not a target)"
        lines.append(f"Targets at R = {cell[0]}, rho = {cell[1]}{where}: {held} of 4 hold")
        for name, ok, measured in checks:
            lines.append(f"  [{'holds' if ok else 'FAILS'}] {name}: {measured}")
    return lines


def print_calibration(cal: Mapping[str, Any]) -> None:
    print("Calibration (paper: memory-free 0.727, DC-RS plain 0.795, with Janus 0.832):")
    for redraw, c in cal.get("by_redraw", {"1.0": cal}).items():
        print(f"  R {redraw}: memory-free {c['memory_free']}, plain {c['plain']}, "
              f"harm-free ceiling {c['ceiling']}")  # fmt: skip
        for rho, d in c["by_rho"].items():
            print(f"    rho {rho}: memory-free {d['memory_free']}, plain {d['plain']}, "
                  f"ceiling {d['ceiling']}")  # fmt: skip
    print()


PLOTTED = ("plain", "janus", "always", "random", "periodic", *ABLATIONS, "ceiling")


def plot(doc: Mapping[str, Any], path: str) -> None:
    """For each rho: accuracy against R per strategy, and accuracy against comparisons."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'planfence[bench]'") from None
    table = summary(doc["rows"])
    rhos = sorted({h for _, h, _ in table})
    redraws = sorted({r for r, _, _ in table})
    fig, axes = plt.subplots(2, len(rhos), figsize=(5 * len(rhos), 8), squeeze=False)
    for col, rho in enumerate(rhos):
        top, bottom = axes[0][col], axes[1][col]
        for name in PLOTTED:
            points = [(r, table[r, rho, name]) for r in redraws if (r, rho, name) in table]
            if not points:
                continue
            xs = [r for r, _ in points]
            ys = [v["accuracy"] for _, v in points]
            err = [v["ci_half"] if math.isfinite(v["ci_half"]) else 0.0 for _, v in points]
            top.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=name)
        top.set_title(f"rho = {rho}: final accuracy vs eval redraw R")
        top.set_xlabel("R (0 = paired evaluations, 1 = independent draws)")
        top.set_ylabel("expected held-out accuracy (mean, 95% CI)")
        top.legend(fontsize=7)
        for (r, h, name), v in table.items():
            if h == rho and name not in ("memory-free", "ceiling"):
                bottom.scatter(v["comparisons_per_step"], v["accuracy"])
                bottom.annotate(f"{name} R{r}", (v["comparisons_per_step"], v["accuracy"]),
                                fontsize=6)  # fmt: skip
        bottom.set_title(f"rho = {rho}: accuracy vs comparisons")
        bottom.set_xlabel("comparisons per post-warm-up step")
        bottom.set_ylabel("final accuracy")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
