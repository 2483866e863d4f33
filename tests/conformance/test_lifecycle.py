"""The lifecycle cases (i) to (l) for every adapter installed here, one test each, in this
process: the store down before the plan is stamped, a second run, the framework's own retries,
what the model sees after a refusal. Case (m), close order, runs in the whole-suite test
(`test_conformance.py`), with every other case."""

from __future__ import annotations

from pathlib import Path

import pytest

from planfence.adapters.conformance import CASES, run_case
from planfence.adapters.conformance.runner import HARNESSES, installed, load
from planfence.shared_memory import MissingExtraError

LIFECYCLE = [c for c in CASES if c.letter in "ijkl"]


@pytest.mark.slow
@pytest.mark.parametrize("case", LIFECYCLE, ids=[f"{c.letter}-{c.name}" for c in LIFECYCLE])
@pytest.mark.parametrize("adapter", list(HARNESSES))
async def test_lifecycle_case(adapter: str, case: object, tmp_path: Path) -> None:
    try:
        harness = load(adapter)
    except MissingExtraError as exc:
        pytest.skip(f"needs pip install 'planfence[{exc.extra}]' (its own venv)")
    if not installed(harness):
        pytest.skip(f"needs pip install 'planfence[{harness.extra}]' (its own venv)")
    result = await run_case(harness(), case, tmp_path)  # type: ignore[arg-type]
    assert result.status == "pass", result.detail
