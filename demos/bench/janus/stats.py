"""Paired differences between strategies over seeds, with 95% confidence intervals.

Every strategy meets the same stream and curator luck on a seed, so the honest comparison is
the per-seed difference; its mean and a Student-t interval over seeds are reported.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from statistics import NormalDist
from typing import Any

ABLATIONS = ("janus-no-coverage", "janus-no-boundary", "janus-no-fresh")
VARIANTS = (
    "janus-no-aim",
    "janus-tie-score",
    "janus-tie-deploy",
    "janus-uncalibrated",
    "janus-momentum",
    "janus-paper",
)
"""planfence's changes to the paper's method, each taken back alone (and all of them)."""


def pairs(strategies: Iterable[str]) -> list[tuple[str, str]]:
    """(a, b) pairs reported as a - b: the paper's claims, the variants, the other momentum
    source, the ceiling."""
    present = set(strategies)
    wanted = [
        ("janus", "plain"),
        ("janus", "random"),
        ("janus", "periodic"),
        ("always", "janus"),
        *((a, "janus") for a in ABLATIONS),
        *((a, "janus") for a in VARIANTS),
        *((s, "janus") for s in sorted(present) if s.startswith("janus-momentum-")),
        ("ceiling", "janus"),
    ]
    return [(a, b) for a, b in wanted if a in present and b in present]


def t_quantile(df: int, p: float = 0.975) -> float:
    """Student-t quantile (Cornish-Fisher expansion around the normal; exact enough for df >= 3)."""
    z = NormalDist().inv_cdf(p)
    if df <= 0:
        return math.inf
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        a = 4 * p * (1 - p)
        return 2 * (p - 0.5) * math.sqrt(2 / a)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


def mean_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """Mean and its 95% interval (low, high); a single value has an infinite interval."""
    m = statistics.fmean(values)
    if len(values) < 2:
        return m, -math.inf, math.inf
    half = t_quantile(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return m, m - half, m + half


Cell = tuple[str, float, float]
"""(stream, eval_redraw, rho)"""
Key = tuple[str, float, float, str]
"""(stream, eval_redraw, rho, strategy)"""


def redraw_of(row: Mapping[str, Any]) -> float:
    """A row's eval_redraw (rows written before it existed were R = 1)."""
    return float(row.get("eval_redraw", 1.0))


def stream_of(row: Mapping[str, Any]) -> str:
    """A row's stream (rows written before there were two were the calibrated stream's)."""
    return str(row.get("stream", "calibrated"))


def cell_of(row: Mapping[str, Any]) -> Cell:
    return (stream_of(row), redraw_of(row), float(row["rho"]))


def cells(rows: Iterable[Mapping[str, Any]]) -> list[Cell]:
    """The (stream, eval_redraw, rho) cells present, sorted."""
    return sorted({cell_of(r) for r in rows})


def by_key(rows: Iterable[Mapping[str, Any]]) -> dict[Key, dict[int, Any]]:
    out: dict[Key, dict[int, Any]] = {}
    for r in rows:
        out.setdefault((*cell_of(r), r["strategy"]), {})[r["seed"]] = r
    return out


def paired(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """a - b in final accuracy per seed, for every cell and every pair in `pairs`."""
    table = by_key(rows)
    out = []
    for cell in cells(rows):
        stream, redraw, rho = cell
        names = [k[3] for k in table if k[:3] == cell]
        for a, b in pairs(names):
            mine_a, mine_b = table[(stream, redraw, rho, a)], table[(stream, redraw, rho, b)]
            seeds = sorted(set(mine_a) & set(mine_b))
            if not seeds:
                continue
            diffs = [mine_a[s]["final_accuracy"] - mine_b[s]["final_accuracy"] for s in seeds]
            m, lo, hi = mean_ci(diffs)
            out.append(
                {
                    "stream": stream,
                    "eval_redraw": redraw,
                    "rho": rho,
                    "a": a,
                    "b": b,
                    "mean_diff": round(m, 5),
                    "ci_low": round(lo, 5),
                    "ci_high": round(hi, 5),
                    "seeds": len(seeds),
                }
            )
    return out


def summary(rows: Sequence[Mapping[str, Any]]) -> dict[Key, dict[str, float]]:
    """Per (stream, R, rho, strategy): accuracy mean and CI half-width, comparisons, harm
    caught, benign edits against the momentum, evaluations and the calibration's settling."""
    out: dict[Key, dict[str, float]] = {}
    for key, per_seed in by_key(rows).items():
        mine = list(per_seed.values())
        m, lo, _ = mean_ci([r["final_accuracy"] for r in mine])
        harmful = sum(r.get("harmful", 0) for r in mine)
        benign = sum(r.get("benign", 0) for r in mine)
        out[key] = {
            "accuracy": m,
            "ci_half": m - lo,
            "comparisons_per_step": statistics.fmean(r["comparisons_per_step"] for r in mine),
            "cost_proxy": statistics.fmean(r["cost_proxy"] for r in mine),
            "deployed": statistics.fmean(r["deployed"] for r in mine),
            "rejected": statistics.fmean(r["rejected"] for r in mine),
            "harm_compared": (
                sum(r.get("harmful_compared", 0) for r in mine) / harmful if harmful else math.nan
            ),
            "harm_deployed": (
                sum(r.get("harmful_deployed", 0) for r in mine) / harmful if harmful else math.nan
            ),
            "benign_compared": (
                sum(r.get("benign_compared", 0) for r in mine) / benign if benign else math.nan
            ),
            "benign_rejected": (
                sum(r.get("benign_rejected", 0) for r in mine) / benign if benign else math.nan
            ),
            "benign_against": (
                sum(r.get("benign_against", 0) for r in mine) / benign if benign else math.nan
            ),
            "evaluations": statistics.fmean(r.get("evaluations", 0) for r in mine),
            "settle_median": _quantile(
                [r["settle"] for r in mine if r.get("settle") is not None], 0.5
            ),
            "settle_p90": _quantile(
                [r["settle"] for r in mine if r.get("settle") is not None], 0.9
            ),
            "labelled": statistics.fmean(r.get("labelled", 0) for r in mine),
        }
    return out


def _quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile (nearest rank) of `values`; nan when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))])


def calibration(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per stream: memory-free, plain and harm-free ceiling accuracy, over everything and per
    rho, and the same for each R (`by_redraw`), where it must hold too."""
    streams = sorted({stream_of(r) for r in rows})
    return {name: _calibration([r for r in rows if stream_of(r) == name]) for name in streams}


def _calibration(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:

    def of(mine: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        def mean_of(strategy: str, rho: float | None = None) -> float | None:
            acc = [
                r["final_accuracy"]
                for r in mine
                if r["strategy"] == strategy and (rho is None or r["rho"] == rho)
            ]
            return round(statistics.fmean(acc), 4) if acc else None

        names = {"memory_free": "memory-free", "plain": "plain", "ceiling": "ceiling"}
        out: dict[str, Any] = {k: mean_of(v) for k, v in names.items()}
        out["by_rho"] = {
            str(rho): {k: mean_of(v, rho) for k, v in names.items()}
            for rho in sorted({r["rho"] for r in mine})
        }
        return out

    out = of(rows)
    out["by_redraw"] = {
        str(r): of([row for row in rows if redraw_of(row) == r])
        for r in sorted({redraw_of(row) for row in rows})
    }
    return out
