"""Concurrency the benchmarks share: steps that run side by side and fail together."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Sequence
from typing import Any


async def together(steps: Sequence[Coroutine[Any, Any, None]]) -> None:
    """Run `steps` side by side; if one fails (or the run is cancelled), stop the others and
    wait for them before the error goes on."""
    tasks = [asyncio.ensure_future(step) for step in steps]
    try:
        await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
