"""planfence.adapters.conformance: one scenario suite that every framework adapter passes.

The cases (`cases.py`) are written once; each adapter provides a `Harness` (`harness.py`) that
builds its framework's agent with a scripted model over the case's `World` (`world.py`).

    python -m planfence.adapters.conformance            # every adapter whose framework is installed
    python -m planfence.adapters.conformance --json     # the same, as JSON

To check an adapter of your own, register its harness as an entry point in the
`planfence.adapters` group (`name = "package.module:HarnessClass"` in your pyproject.toml) and run
`python -m planfence.adapters.conformance --adapter name`, or run it directly:
`await run_case(MyHarness(), case, tmp_path)` for each of `CASES`. `seam.py` is the reference
harness, with no framework.
"""

from .cases import CASES
from .harness import Harness, Run, controlled
from .runner import run_case, run_suite, table
from .world import KEY, Script, World

__all__ = [
    "CASES",
    "KEY",
    "Harness",
    "Run",
    "Script",
    "World",
    "controlled",
    "run_case",
    "run_suite",
    "table",
]
