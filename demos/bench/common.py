"""Small helpers shared by the benchmarks: percentiles and JSON output."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation."""
    if not samples:
        return float("nan")
    data = sorted(samples)
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def summary_ms(samples_s: Sequence[float]) -> dict[str, float]:
    ms = [s * 1000.0 for s in samples_s]
    return {
        "p50_ms": round(percentile(ms, 50), 4),
        "p99_ms": round(percentile(ms, 99), 4),
        "mean_ms": round(statistics.fmean(ms), 4) if ms else float("nan"),
    }


def write_json(path: str | None, data: Any) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
