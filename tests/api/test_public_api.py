"""The public API is a contract: what `public_api.py` reads from the source with griffe must be
`public_api.txt`, name for name and signature for signature. A change to the API shows up here as
a diff to review; once it is deliberate, `python tests/api/public_api.py --write` records it."""

from __future__ import annotations

import difflib
import re

from public_api import SNAPSHOT, render

# The surface a newcomer holds in their head: every public package's `__all__` together.
MAX_PUBLIC_NAMES = 200


def test_the_public_api_is_the_recorded_one() -> None:
    now = render()
    recorded = SNAPSHOT.read_text()
    if now != recorded:
        diff = "".join(
            difflib.unified_diff(
                recorded.splitlines(keepends=True),
                now.splitlines(keepends=True),
                "public_api.txt (recorded)",
                "the source now",
            )
        )
        raise AssertionError(
            "the public API changed; if that is deliberate, run "
            f"`python tests/api/public_api.py --write` and commit the diff:\n{diff}"
        )


def test_the_public_surface_stays_small() -> None:
    counts = {
        m.group(1): int(m.group(2))
        for m in re.finditer(r"^## (\S+) \((\d+)\)$", SNAPSHOT.read_text(), re.M)
    }
    assert "planfence.plugins.gate" in counts and "planfence.shared_memory" in counts
    assert sum(counts.values()) < MAX_PUBLIC_NAMES, counts
