"""Mahimahi packet-delivery traces: one line is one opportunity to send one 1500-byte packet at
that millisecond, and the trace loops."""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass
from pathlib import Path

MTU = 1500


class TraceError(ValueError):
    """A trace file that cannot drive a link."""


@dataclass(frozen=True)
class Trace:
    """A mahimahi trace: sorted millisecond timestamps, each one opportunity to send one MTU.

    The trace loops with a period equal to its last timestamp (as mahimahi replays it), so
    opportunity `i` is at `times[i % n] + (i // n) * period`.
    """

    times: tuple[int, ...]
    source: str = "<trace>"

    def __post_init__(self) -> None:
        if not self.times:
            raise TraceError(f"{self.source}: the trace has no delivery opportunities")
        ordered = all(a <= b for a, b in zip(self.times, self.times[1:], strict=False))
        if not ordered or self.times[0] < 0:
            raise TraceError(f"{self.source}: timestamps must be non-negative and non-decreasing")
        if self.times[-1] <= 0:
            raise TraceError(f"{self.source}: the last timestamp must be after 0 ms")

    @classmethod
    def parse(cls, text: str, source: str = "<trace>") -> Trace:
        times = []
        for lineno, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line:
                continue
            try:
                times.append(int(line))
            except ValueError:
                raise TraceError(f"{source}:{lineno}: not a millisecond count: {line!r}") from None
        return cls(tuple(times), source)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Trace:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise TraceError(f"cannot read trace {path}: {exc.strerror or exc}") from None
        return cls.parse(text, str(path))

    @property
    def period(self) -> int:
        return self.times[-1]

    @property
    def mean_mbps(self) -> float:
        """Capacity averaged over one loop, in Mbit/s."""
        return len(self.times) * MTU * 8 / self.period / 1000

    def at(self, index: int) -> int:
        """Time (ms) of opportunity number `index`, counting across loops."""
        loops, i = divmod(index, len(self.times))
        return self.times[i] + loops * self.period

    def first_at_or_after(self, t_ms: float, min_index: int = 0) -> int:
        """Index of the first opportunity at or after `t_ms`, and not before `min_index`."""
        n = len(self.times)
        t = max(t_ms, 0.0)
        loops = int(t // self.period)
        i = bisect.bisect_left(self.times, t - loops * self.period)
        index = loops * n + i
        while index > 0 and self.at(index - 1) >= t:  # equal times straddling a loop boundary
            index -= 1
        return max(index, min_index)
