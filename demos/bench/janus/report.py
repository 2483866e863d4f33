"""What `planfence bench janus` prints: tables per cell, paired differences, the verdict on the
targets, the calibration's settling, and a plot."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from .stats import ABLATIONS, Cell, cells, summary

BANNER = (
    "CONTROLLED SIMULATION: seeded streams (calibrated: arithmetic cheatsheets; runbook: an "
    "operations runbook where the paper's premise fails), curators that also write harmful "
    "edits, evaluations by a latent threshold per task (no LLM).\nrho = share of harmful "
    "edits that are abrupt rewrites; R = eval_redraw, the chance an evaluation draws afresh "
    "(0 paired, 1 independent); final accuracy = expected held-out accuracy."
)
TARGET_CELLS: dict[str, Cell] = {
    "calibrated": ("calibrated", 0.0, 0.8),
    "runbook": ("runbook", 0.0, 1.0),
}


def _pct(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.0%}"


def _num(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.0f}"


def _where(cell: Sequence[Any]) -> str:
    return f"{cell[0]}, R = {cell[1]}, rho = {cell[2]}"


def print_tables(rows: Sequence[Mapping[str, Any]]) -> None:
    table = summary(rows)
    for cell in cells(rows):
        print(_where(cell))
        print(f"{'strategy':<20}{'accuracy ± 95% CI':>18}{'cmp/step':>9}{'evals':>7}"
              f"{'deployed':>9}{'rejected':>9}{'harm cmp':>9}{'harm dep':>9}"
              f"{'benign cmp':>11}{'benign rej':>11}{'against':>8}{'settle':>7}")  # fmt: skip
        for key, v in table.items():
            if key[:3] != cell:
                continue
            acc = f"{v['accuracy']:.3f} ± {v['ci_half']:.3f}"
            print(
                f"{key[3]:<20}{acc:>18}{v['comparisons_per_step']:>9.3f}{v['evaluations']:>7.0f}"
                f"{v['deployed']:>9.1f}{v['rejected']:>9.1f}{_pct(v['harm_compared']):>9}"
                f"{_pct(v['harm_deployed']):>9}{_pct(v['benign_compared']):>11}"
                f"{_pct(v['benign_rejected']):>11}{_pct(v['benign_against']):>8}"
                f"{_num(v['settle_median']):>7}"
            )
        print()


def print_paired(paired: Sequence[Mapping[str, Any]]) -> None:
    print("Paired differences over seeds (a - b, final accuracy, 95% CI):")
    for p in paired:
        stream, redraw = p.get("stream", "calibrated"), p.get("eval_redraw", 1.0)
        where = f"{stream:<10} R {redraw:<4} rho {p['rho']:<4}"
        print(f"  {where} {p['a'] + ' - ' + p['b']:<34}{p['mean_diff']:>+8.4f}  "
              f"[{p['ci_low']:+.4f}, {p['ci_high']:+.4f}]")  # fmt: skip
    print()


def _diff(paired: Sequence[Mapping[str, Any]], cell: Cell, a: str, b: str) -> Mapping[str, Any]:
    for p in paired:
        at = (p.get("stream", "calibrated"), p.get("eval_redraw", 1.0), p["rho"])
        if at == cell and p["a"] == a and p["b"] == b:
            return p
    nan = math.nan
    return {"mean_diff": nan, "ci_low": nan, "ci_high": nan}


def _show(p: Mapping[str, Any]) -> str:
    return f"{p['mean_diff']:+.4f} [{p['ci_low']:+.4f}, {p['ci_high']:+.4f}]"


def targets(
    rows: Sequence[Mapping[str, Any]], paired: Sequence[Mapping[str, Any]], cell: Cell
) -> list[tuple[str, bool, str]]:
    """The targets of a cell's stream, checked in that cell: (name, holds, measured)."""
    table = summary(rows)
    nan = math.nan
    mine = {k[3]: v for k, v in table.items() if k[:3] == cell}
    janus, always = mine.get("janus", {}), mine.get("always", {})
    j_cps = janus.get("comparisons_per_step", nan)
    a_cps = always.get("comparisons_per_step", nan)
    jp, jr, jq = (_diff(paired, cell, "janus", b) for b in ("plain", "random", "periodic"))
    aj = _diff(paired, cell, "always", "janus")
    baselines = (
        "Janus > plain, random and periodic at its rate (CI low > 0)",
        jp["ci_low"] > 0 and jr["ci_low"] > 0 and jq["ci_low"] > 0,
        f"vs plain {_show(jp)}, vs random {_show(jr)}, vs periodic {_show(jq)}",
    )
    if cell[0] == "runbook":
        caught = janus.get("harm_compared", nan)
        return [
            ("comparisons <= 30% of the post-warm-up steps", j_cps <= 0.3, f"{j_cps:.3f}"),
            ("Janus compares >= 95% of the harmful updates", caught >= 0.95, _pct(caught)),
            ("always - Janus <= 0.02", aj["mean_diff"] <= 0.02, _show(aj)),
            baselines,
        ]
    abl = {a: _diff(paired, cell, a, "janus") for a in ABLATIONS}
    return [
        (
            "Janus - plain >= +0.027 with CI low > 0",
            jp["mean_diff"] >= 0.027 and jp["ci_low"] > 0,
            _show(jp),
        ),
        ("always - Janus <= 0.01", aj["mean_diff"] <= 0.01, _show(aj)),
        (
            "Janus at <= 40% of always's comparisons",
            j_cps <= 0.4 * a_cps,
            f"{j_cps:.3f} vs {a_cps:.3f} cmp/step",
        ),
        baselines,
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
    table = summary(rows)
    for cell in cells(rows):
        checks = targets(rows, paired, cell)
        held = sum(ok for _, ok, _ in checks)
        target = TARGET_CELLS.get(cell[0]) == cell
        where = " (the target cell)" if target else " (reported, not a target)"
        lines.append(f"Targets at {_where(cell)}{where}: {held} of {len(checks)} hold")
        for name, ok, measured in checks:
            lines.append(f"  [{'holds' if ok else 'FAILS'}] {name}: {measured}")
        janus = table.get((*cell, "janus"), {})
        if not math.isnan(janus.get("settle_median", math.nan)):
            lines.append(
                f"  calibration settles after {_num(janus['settle_median'])} comparisons "
                f"(median over seeds; 90th percentile {_num(janus['settle_p90'])}), "
                f"{janus['labelled']:.0f} decisive of {janus['comparisons_per_step']:.3f} "
                "comparisons per step"
            )
    return lines


def print_calibration(cal: Mapping[str, Any]) -> None:
    print("Calibration (paper: memory-free 0.727, DC-RS plain 0.795, with Janus 0.832):")
    for stream, per in cal.items():
        for redraw, c in per.get("by_redraw", {"1.0": per}).items():
            print(f"  {stream} R {redraw}: memory-free {c['memory_free']}, plain {c['plain']}, "
                  f"harm-free ceiling {c['ceiling']}")  # fmt: skip
            for rho, d in c["by_rho"].items():
                print(f"    rho {rho}: memory-free {d['memory_free']}, plain {d['plain']}, "
                      f"ceiling {d['ceiling']}")  # fmt: skip
    print()


PLOTTED = (
    "plain",
    "janus",
    "janus-tie-score",
    "janus-momentum",
    "janus-paper",
    "always",
    "random",
    "periodic",
)
"""The strategies drawn: the defaults, the score tie rule beside them, the momentum trigger, the
paper's method and the baselines."""


def plot(doc: Mapping[str, Any], path: str) -> None:
    """Per stream and rho: accuracy against R per strategy (top), and accuracy against
    comparisons per step (bottom)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'planfence[bench]'") from None
    table = summary(doc["rows"])
    panels = sorted({(k[0], k[2]) for k in table})
    redraws = sorted({k[1] for k in table})
    fig, axes = plt.subplots(2, len(panels), figsize=(4.5 * len(panels), 8), squeeze=False)
    for col, (stream, rho) in enumerate(panels):
        top, bottom = axes[0][col], axes[1][col]
        for name in (*PLOTTED, "ceiling"):
            points = [
                (r, table[stream, r, rho, name]) for r in redraws if (stream, r, rho, name) in table
            ]
            if not points:
                continue
            xs = [r for r, _ in points]
            ys = [v["accuracy"] for _, v in points]
            err = [v["ci_half"] if math.isfinite(v["ci_half"]) else 0.0 for _, v in points]
            top.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=name)
        top.set_title(f"{stream}, rho = {rho}: accuracy vs R", fontsize=9)
        top.set_xlabel("R (0 = paired evaluations, 1 = independent draws)")
        top.set_ylabel("expected held-out accuracy (mean, 95% CI)")
        top.legend(fontsize=6)
        for (s, r, h, name), v in table.items():
            if (s, h) == (stream, rho) and name in PLOTTED:
                bottom.scatter(v["comparisons_per_step"], v["accuracy"], s=12)
                bottom.annotate(f"{name} R{r}", (v["comparisons_per_step"], v["accuracy"]),
                                fontsize=5)  # fmt: skip
        bottom.set_title(f"{stream}, rho = {rho}: accuracy vs comparisons", fontsize=9)
        bottom.set_xlabel("comparisons per post-warm-up step")
        bottom.set_ylabel("final accuracy")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
