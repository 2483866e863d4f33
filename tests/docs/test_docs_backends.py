"""docs/backends.md shows a whole backend inline (a package user has no tests folder to look
in): it is exactly the toy store the conformance suite runs on (tests/store/toy_store.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_backend_in_the_guide_is_the_one_the_suite_proves() -> None:
    guide = (ROOT / "docs" / "backends.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", guide, re.S)
    shown = [b for b in blocks if "class ToyStore(AsyncStore)" in b]
    assert shown == [(ROOT / "tests" / "store" / "toy_store.py").read_text(encoding="utf-8")]
    assert "tests/store" not in guide  # nothing a package user cannot open
