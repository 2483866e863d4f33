"""The replayed stream (pure, seeded): which replica acts on which keys in each window, which
updates land after planning, what that implies for every executor, and where two stall curves
cross."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

RATES = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
DEFAULT_KEYS = 16
DEFAULT_REPLICAS = 3
LATE_SHARE = 0.2


@dataclass(frozen=True)
class Window:
    """Action `index`, taken by replica `replica`, on a tool depending on keys `keys` (indexes).

    Its plan is derived at the start of the window; the updates to `post` land between planning
    and the check, those to `late` after the check (during a replan, else after the action).
    """

    index: int
    replica: int
    keys: tuple[int, ...]
    post: tuple[int, ...]
    late: tuple[int, ...]

    @property
    def updates(self) -> int:
        return len(self.post) + len(self.late)

    @property
    def stale(self) -> bool:
        """A post-plan revision touched D(a): the plan is stale at its check."""
        return bool(set(self.post) & set(self.keys))

    @property
    def overtaken(self) -> bool:
        """Stale, and a late update touched D(a) again while the replan was written."""
        return self.stale and bool(set(self.late) & set(self.keys))


def schedule(
    rate: float,
    actions: int,
    *,
    keys: int = DEFAULT_KEYS,
    replicas: int = DEFAULT_REPLICAS,
    seed: int = 1,
    late_share: float = LATE_SHARE,
) -> list[Window]:
    """The replayed stream at `rate` updates per action: the same actions at every rate."""
    if rate < 0 or actions < 1 or keys < 2 or replicas < 1 or not 0.0 <= late_share < 1.0:
        raise ValueError(
            "need rate >= 0, actions >= 1, keys >= 2, replicas >= 1 and late_share in [0, 1)"
        )
    draw = random.Random(f"replay-actions:{seed}:{keys}:{replicas}")
    acts = []
    for _ in range(actions):
        replica = draw.randrange(replicas)
        deps = draw.choice((1, 2))
        acts.append((replica, tuple(sorted(draw.sample(range(keys), deps)))))
    draw = random.Random(f"replay-updates:{seed}:{keys}:{float(rate)!r}")
    total = math.floor(rate * actions + 0.5)
    placed = sorted((draw.random() * actions, draw.randrange(keys)) for _ in range(total))
    post: list[list[int]] = [[] for _ in range(actions)]
    late: list[list[int]] = [[] for _ in range(actions)]
    for at, key in placed:
        i = min(int(at), actions - 1)
        (late if at - i >= 1.0 - late_share else post)[i].append(key)
    return [
        Window(i, replica, deps, tuple(post[i]), tuple(late[i]))
        for i, (replica, deps) in enumerate(acts)
    ]


@dataclass(frozen=True)
class Expected:
    """What the stream implies for every executor, independent of timing."""

    actions: int
    updates: int
    stale: int  # plans stale at their check: safe executors replan, freshness acts invalidly
    overtaken: int  # of those, replans overtaken by a late update: safe executors block


def expect(windows: Sequence[Window]) -> Expected:
    return Expected(
        actions=len(windows),
        updates=sum(w.updates for w in windows),
        stale=sum(w.stale for w in windows),
        overtaken=sum(w.overtaken for w in windows),
    )


def crossover(
    points: Iterable[tuple[float, float, float]],
) -> tuple[float | None, float | None]:
    """From (rate, planfence, rival) points: the lowest grid rate from which planfence stays
    below the rival at every higher rate, and where the two cross between that grid rate and the
    one below it, interpolated linearly in the rate (an update path's cost grows linearly with
    it). The second value is None when planfence is already below at the lowest rate, or never."""
    pts = sorted(points)
    start = len(pts)
    while start > 0 and pts[start - 1][1] < pts[start - 1][2]:
        start -= 1
    if start == len(pts):
        return None, None
    if start == 0:
        return pts[0][0], None
    (r0, p0, q0), (r1, p1, q1) = pts[start - 1], pts[start]
    d0, d1 = p0 - q0, p1 - q1  # d0 >= 0 > d1
    return r1, round(r0 + (r1 - r0) * d0 / (d0 - d1), 3)
