"""Runs the cases against harnesses: each case on a fresh world, in its own temporary folder."""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from planfence.shared_memory import MissingExtraError

from .cases import CASES, Case, CaseFailure
from .harness import Harness
from .world import open_world

ENTRY_POINTS = "planfence.adapters"
"""The entry-point group an adapter registers its harness in (its row name = "module:Class")."""


def registered() -> dict[str, str]:
    """Adapter name -> its harness class as "module:Class", from every installed distribution's
    `planfence.adapters` entry points (planfence's own in its pyproject.toml): the reference
    harness first, then by name."""
    found = {ep.name: ep.value for ep in entry_points(group=ENTRY_POINTS)}
    return dict(sorted(found.items(), key=lambda item: (item[0] != "seam", item[0])))


HARNESSES: dict[str, str] = registered()
"""Adapter name -> its harness class, as "module:Class" (see `registered`)."""

PASS, FAIL, ERROR, MISSING = "pass", "FAIL", "error", "not installed"
CASE_TIMEOUT = 120.0


@dataclass(frozen=True)
class Result:
    adapter: str
    case: str
    status: str
    detail: str
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "adapter": self.adapter,
            "case": self.case,
            "status": self.status,
            "detail": self.detail,
            "seconds": round(self.seconds, 3),
        }


def load(name: str) -> type[Harness]:
    """The harness class registered as `name`."""
    module, _, attr = HARNESSES[name].partition(":")
    found: type[Harness] = getattr(importlib.import_module(module), attr)
    return found


def installed(harness: type[Harness]) -> bool:
    """Whether every module the harness needs can be imported."""
    try:
        return all(importlib.util.find_spec(m) is not None for m in harness.modules)
    except (ImportError, ValueError):
        return False


async def run_case(harness: Harness, case: Case, root: Path) -> Result:
    started = time.perf_counter()
    world = await open_world(root / f"{case.letter}-{case.name}")
    try:
        detail = await asyncio.wait_for(case.run(harness, world), CASE_TIMEOUT)
        status = PASS
    except CaseFailure as exc:
        status, detail = FAIL, str(exc)
    except asyncio.TimeoutError:
        status, detail = ERROR, f"timed out after {CASE_TIMEOUT:.0f} s"
    except Exception as exc:
        status = ERROR
        where = traceback.extract_tb(exc.__traceback__)[-1]
        detail = f"{type(exc).__name__}: {exc} ({Path(where.filename).name}:{where.lineno})"
    finally:
        await world.aclose()
    return Result(harness.name, case.letter, status, detail, time.perf_counter() - started)


async def run_suite(
    adapters: Iterable[str] | None = None,
    cases: Sequence[str] | None = None,
    *,
    progress: Callable[[Result], None] | None = None,
) -> list[Result]:
    """Run `cases` (letters; default all) for `adapters` (default every registered one); an
    adapter whose framework is not installed gets one row saying so."""
    chosen = [c for c in CASES if cases is None or c.letter in cases]
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="planfence-conformance-") as tmp:
        for name in adapters if adapters is not None else HARNESSES:
            try:  # a harness module imports its framework: missing, it says which extra
                cls = load(name)
            except MissingExtraError as exc:
                hint = f"pip install 'planfence[{exc.extra}]'"
                results.append(Result(name, "*", MISSING, hint, 0.0))
                continue
            if not installed(cls):
                hint = f"pip install 'planfence[{cls.extra}]'"
                results.append(Result(name, "*", MISSING, hint, 0.0))
                continue
            for case in chosen:
                result = await run_case(cls(), case, Path(tmp) / name)
                results.append(result)
                if progress is not None:
                    progress(result)
    return results


def table(results: Sequence[Result]) -> str:
    """Adapter by case, one cell per result."""
    letters = [c.letter for c in CASES]
    rows: dict[str, dict[str, str]] = {}
    for r in results:
        cells = dict(rows.get(r.adapter, {}))
        if r.case == "*":
            cells = dict.fromkeys(letters, "-")
            cells["note"] = r.detail
        else:
            cells[r.case] = r.status
        rows[r.adapter] = cells
    width = max([len("adapter"), *map(len, rows)])
    head = f"{'adapter':<{width}}  " + "  ".join(f"({c})".ljust(5) for c in letters)
    lines = [head]
    for name, cells in rows.items():
        line = f"{name:<{width}}  " + "  ".join(f"{cells.get(c, ''):<5}" for c in letters)
        if "note" in cells:
            line += f"  {cells['note']}"
        lines.append(line.rstrip())
    lines[0] = lines[0].rstrip()
    failed = [r for r in results if r.status in (FAIL, ERROR)]
    for r in failed:
        lines.append(f"{r.adapter} ({r.case}) {r.status}: {r.detail}")
    return "\n".join(lines)
